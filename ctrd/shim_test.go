package ctrd

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/ttrpc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A ttrpc server that does not serve task API v3, as a containerd 1.6 shim, answers
// a v3 call so that ShimLacksV3 sends the caller to v2; other failures do not.
func TestShimLacksV3(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "shim.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv, err := ttrpc.NewServer()
	require.NoError(t, err)
	go func() { _ = srv.Serve(context.Background(), l) }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc, err := DialShim(ctx, sock)
	require.NoError(t, err)
	defer tc.Close()
	_, err = taskv3.NewTTRPCTaskClient(tc).Wait(ctx, &taskv3.WaitRequest{ID: "c1"})
	require.Error(t, err)
	require.True(t, ShimLacksV3(err), "%v", err)

	require.False(t, ShimLacksV3(nil))
	require.False(t, ShimLacksV3(status.Error(codes.NotFound, "task c1 not found")))
	require.False(t, ShimLacksV3(errors.New("not implemented")))

	_, err = DialShim(ctx, filepath.Join(t.TempDir(), "none.sock"))
	require.ErrorContains(t, err, "connect to shim")
}
