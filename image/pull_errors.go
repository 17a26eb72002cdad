package image

import (
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/errdefs"
)

// classifyPullError gives a failed pull its errdefs class, keeps the registry's
// message and names the registry:
//
//	401, bad credentials        Unauthenticated
//	403                         PermissionDenied
//	404, no such manifest/tag   NotFound
//	429                         ResourceExhausted
//	5xx, network failures       Unavailable (connection refused, DNS, timeouts, TLS)
//	a corrupt compressed layer  FailedPrecondition (as a digest mismatch)
//
// Errors already classified keep their class.
func classifyPullError(ref Ref, err error) error {
	where := fmt.Sprintf("pull %s from registry %s", ref.Name, ref.Host())
	var status remoteerrors.ErrUnexpectedStatus
	if errors.As(err, &status) {
		switch code := status.StatusCode; {
		case code == http.StatusUnauthorized:
			return fmt.Errorf("%s: the registry refused the credentials (%s): %v: %w", where, status.Status, err, errdefs.ErrUnauthenticated)
		case code == http.StatusForbidden:
			return fmt.Errorf("%s: access denied (%s): %v: %w", where, status.Status, err, errdefs.ErrPermissionDenied)
		case code == http.StatusNotFound:
			return fmt.Errorf("%s: not found: %v: %w", where, err, errdefs.ErrNotFound)
		case code == http.StatusTooManyRequests:
			return fmt.Errorf("%s: rate limited: %v: %w", where, err, errdefs.ErrResourceExhausted)
		case code >= 500:
			return fmt.Errorf("%s: registry error: %v: %w", where, err, errdefs.ErrUnavailable)
		}
	}
	switch {
	case errors.Is(err, docker.ErrInvalidAuthorization):
		return fmt.Errorf("%s: the registry refused the credentials: %v: %w", where, err, errdefs.ErrUnauthenticated)
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s: image not found: %w", where, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", where, err)
	case isNetworkError(err):
		return fmt.Errorf("%s: registry unreachable: %v: %w", where, err, errdefs.ErrUnavailable)
	case isCorruptLayer(err):
		// As a layer that does not match its digest (see verifier).
		return fmt.Errorf("%s: corrupt layer: %v: %w", where, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// isCorruptLayer tells a layer whose compressed stream cannot be read.
func isCorruptLayer(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &corrupt)
}

// isNetworkError tells a failure to reach the registry: refused or reset connections,
// name resolution, timeouts and other net.Errors.
func isNetworkError(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var netErr net.Error
	// A bare syscall.Errno is a net.Error too (it has Timeout and Temporary): a layer
	// that cannot be applied ("link a b: no such file or directory") is not one.
	var errno syscall.Errno
	isNetErr := errors.As(err, &netErr) && !errors.As(netErr, &errno)
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) || isNetErr ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
