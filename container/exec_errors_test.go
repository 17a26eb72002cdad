package container

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExecStartExitCode(t *testing.T) {
	const prefix = "OCI runtime exec failed: exec failed: unable to start container process: "
	tests := []struct {
		msg  string
		code uint32
		ok   bool
	}{
		{prefix + `exec: "/does-not-exist": stat /does-not-exist: no such file or directory: unknown`, 127, true},
		{prefix + `exec: "nope": executable file not found in $PATH: unknown`, 127, true},
		{prefix + `exec: "/etc/passwd": permission denied: unknown`, 126, true},
		{prefix + `exec: "/bin/x": exec format error: unknown`, 126, true},
		{"create task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: " +
			`error during container init: exec: "/does-not-exist": stat /does-not-exist: no such file or directory`, 127, true},
		{"cannot exec in a stopped state: unknown", 0, false},
		{prefix + "error setting cgroup config: no such file or directory", 0, false},
	}
	for _, tt := range tests {
		code, ok := execStartExitCode(errors.New(tt.msg))
		require.Equal(t, tt.ok, ok, tt.msg)
		require.Equal(t, tt.code, code, tt.msg)
	}
	require.Equal(t, `exec: "/x": stat /x: no such file or directory`,
		execStartMessage(errors.New(prefix+`exec: "/x": stat /x: no such file or directory: unknown`)))
}

// A failed exec tells the container's exit from an OOM event of its own process:
// only events after oomsBefore count, and neither within the wait is neither.
func TestAwaitExitOrOOM(t *testing.T) {
	ctx := context.Background()
	c := &Container{ID: "c", exited: make(chan struct{})}
	c.markOOM()
	exited, oom := c.awaitExitOrOOM(ctx, c.oomCount(), 60*time.Millisecond)
	require.False(t, exited)
	require.False(t, oom, "an OOM before the exec is not the exec's")

	before := c.oomCount()
	go func() { time.Sleep(10 * time.Millisecond); c.markOOM() }()
	exited, oom = c.awaitExitOrOOM(ctx, before, 5*time.Second)
	require.False(t, exited)
	require.True(t, oom)
	require.Equal(t, 2, c.oomCount())

	close(c.exited)
	exited, oom = c.awaitExitOrOOM(ctx, c.oomCount(), 5*time.Second)
	require.True(t, exited)
	require.False(t, oom)
}
