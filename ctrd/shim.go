package ctrd

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Calls straight to a shim, past containerd: stopping a stuck or orphaned shim
// (sandbox) and waiting for exits while containerd is away (container). containerd
// 2.x shims serve task API v3; containerd 1.6 shims serve v2 only, and answer a v3
// call Unimplemented (ShimLacksV3), so each caller tries v3 first.

// DialShim connects to the shim listening on sock.
func DialShim(ctx context.Context, sock string) (*ttrpc.Client, error) {
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("connect to shim: %w", err)
	}
	return ttrpc.NewClient(conn), nil
}

// ShimLacksV3 tells whether err is a shim's answer to a task API v3 call it does not
// serve (a containerd 1.6 shim): then ask again through v2.
func ShimLacksV3(err error) bool { return status.Code(err) == codes.Unimplemented }
