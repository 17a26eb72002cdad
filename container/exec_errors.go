package container

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
)

// Exit codes of a command that could not be run, as POSIX shells give them.
const (
	exitCommandNotFound      = 127
	exitCommandNotExecutable = 126
)

// execStartExitCode maps runc's failure to exec the command (missing binary, not
// executable) to the shell's exit code for it. runc's message is the only
// information that crosses the shim: "exec failed: unable to start container
// process: exec: \"/x\": stat /x: no such file or directory" (for a container's
// init: "unable to start container process: error during container init: exec: ...").
func execStartExitCode(err error) (uint32, bool) {
	msg := err.Error()
	if !strings.Contains(msg, "unable to start container process: ") || !strings.Contains(msg, `exec: "`) {
		return 0, false
	}
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "executable file not found"):
		return exitCommandNotFound, true
	case strings.Contains(msg, "permission denied"), strings.Contains(msg, "exec format error"),
		strings.Contains(msg, "is a directory"):
		return exitCommandNotExecutable, true
	}
	return 0, false
}

// execStartMessage is the part of runc's message that names the command and the reason.
func execStartMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "exec: "); i >= 0 {
		msg = msg[i:]
	}
	return strings.TrimSuffix(msg, ": unknown")
}

// exitGrace is how long a failed exec waits for the container's exit to be seen: a
// stop that raced the exec kills the container's init under the new process (runc then
// fails in many ways: "procReady not received", "failed to open /proc/PID/ns/ipc"),
// and the exit event follows within milliseconds. It is also how long a failed exec
// waits for the OOM event of its own process.
const exitGrace = time.Second

// runcOOMHint is what runc adds to an exec whose runc init died before the process
// started (broken pipe, no procReady): in practice, the OOM killer in the container's
// memory limit, which runc's init has to fit in beside the container.
const runcOOMHint = "possibly OOM-killed"

// execError classifies a failed exec: when the container's task is gone, no longer
// running or exits within exitGrace (a stop raced the exec) the request is
// FailedPrecondition; when the exec's process was OOM-killed before it started (an
// OOM event for the cgroup since oomsBefore, or runc's hint) it is ResourceExhausted;
// errors the shim classified keep their class.
func execError(ctx context.Context, task client.Task, c *Container, oomsBefore int, err error) error {
	notRunning := fmt.Errorf("exec in container %s: the container is not running: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	if strings.Contains(err.Error(), "cannot exec in a stopped state") {
		return notRunning
	}
	if st, serr := task.Status(ctx); errdefs.IsNotFound(serr) || (serr == nil && st.Status != client.Running) {
		return notRunning
	}
	exited, oom := c.awaitExitOrOOM(ctx, oomsBefore, exitGrace)
	switch {
	case exited:
		return notRunning
	case oom || strings.Contains(err.Error(), runcOOMHint):
		return fmt.Errorf("exec in container %s: its process was killed before it started, by the OOM killer in the container's memory limit: %v: %w",
			c.ID, err, errdefs.ErrResourceExhausted)
	}
	return fmt.Errorf("exec in container %s: %w", c.ID, err)
}

// awaitExitOrOOM waits up to d (or ctx) for the container's exit or an OOM event
// beyond the first oomsBefore, and says which came.
func (c *Container) awaitExitOrOOM(ctx context.Context, oomsBefore int, d time.Duration) (exited, oom bool) {
	tick := time.NewTicker(d / 20)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case <-c.exited:
			return true, false
		case <-tick.C:
			if c.oomCount() > oomsBefore {
				return false, true
			}
		case <-deadline.C:
			return false, c.oomCount() > oomsBefore
		case <-ctx.Done():
			return false, c.oomCount() > oomsBefore
		}
	}
}
