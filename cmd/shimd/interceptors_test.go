package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A full disk is ResourceExhausted, whether shimd's own write failed or
// containerd's (whose errno reaches shimd only as text).
func TestToGRPCFullDisk(t *testing.T) {
	ctx := context.Background()
	for err, want := range map[error]codes.Code{
		fmt.Errorf("write hosts file: %w", syscall.ENOSPC):                      codes.ResourceExhausted,
		fmt.Errorf("write status: %w", syscall.EDQUOT):                          codes.ResourceExhausted,
		errors.New("prepare writable layer: mkdir /x: no space left on device"): codes.ResourceExhausted,
		fmt.Errorf("pod %s: %w", "x", errdefs.ErrNotFound):                      codes.NotFound,
		fmt.Errorf("deadline: %w", context.DeadlineExceeded):                    codes.DeadlineExceeded,
		fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument):                       codes.InvalidArgument,
	} {
		if got := status.Code(toGRPC(ctx, err)); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}
