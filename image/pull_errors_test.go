package image

import (
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
)

func TestClassifyPullError(t *testing.T) {
	ref, err := ParseRef("registry.example:5000/app:1")
	require.NoError(t, err)
	status := func(code int) error {
		return fmt.Errorf("resolve: %w", remoteerrors.ErrUnexpectedStatus{StatusCode: code, Status: http.StatusText(code), RequestMethod: "GET", RequestURL: "https://registry.example:5000/v2/"})
	}
	refused := fmt.Errorf("failed to do request: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	tests := []struct {
		name  string
		err   error
		class func(error) bool
	}{
		{"401", status(401), errdefs.IsUnauthorized},
		{"403", status(403), errdefs.IsPermissionDenied},
		{"404", status(404), errdefs.IsNotFound},
		{"429", status(429), errdefs.IsResourceExhausted},
		{"503", status(503), errdefs.IsUnavailable},
		{"not found", fmt.Errorf("app:1: %w", errdefs.ErrNotFound), errdefs.IsNotFound},
		{"connection refused", refused, errdefs.IsUnavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "registry.example", IsNotFound: true}, errdefs.IsUnavailable},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), errdefs.IsUnavailable},
		{"corrupt gzip", fmt.Errorf("layer sha256:1: %w", gzip.ErrHeader), errdefs.IsFailedPrecondition},
		{"corrupt deflate", fmt.Errorf("layer sha256:1: %w", flate.CorruptInputError(7)), errdefs.IsFailedPrecondition},
		{"invalid argument stays", fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument), errdefs.IsInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classifyPullError(ref, tt.err)
			require.True(t, tt.class(got), "%v", got)
			require.ErrorContains(t, got, "registry.example:5000")
			require.Contains(t, got.Error(), tt.err.Error(), "the registry's message is kept")
		})
	}
	require.False(t, errdefs.IsUnavailable(classifyPullError(ref, errors.New("something else"))))
	// A layer that cannot be applied is no network failure, though its errno is a net.Error.
	unpack := fmt.Errorf("apply layer: %w", &os.LinkError{Op: "link", Old: "a", New: "b", Err: syscall.ENOENT})
	require.False(t, errdefs.IsUnavailable(classifyPullError(ref, unpack)))
	require.True(t, errdefs.IsUnavailable(classifyPullError(ref, &url.Error{Op: "Get", URL: "http://r/v2/", Err: &net.OpError{Op: "read", Err: syscall.ETIMEDOUT}})))
}
