package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
)

// TaskExit is told of every task or exec process that exits in shimd's namespace
// (by the event monitor, package taskevents): a pause process that exits leaves its
// sandbox NOTREADY.
func (m *Manager) TaskExit(containerID, execID string, _ uint32, _ time.Time) {
	if containerID != execID {
		return
	}
	if sb, err := m.store.get(containerID); err == nil && sb.ID == containerID {
		sb.setState(pod.NotReady)
		return
	}
	if v, ok := m.running.Load(containerID); ok { // ready, not yet listed (Run's announce)
		v.(*Sandbox).setState(pod.NotReady)
	}
}

// Resync marks NOTREADY every READY sandbox whose pause process is no longer running.
// The event monitor runs it after every (re)subscription to containerd's events: exits
// that happened while the stream was down were never published.
func (m *Manager) Resync(ctx context.Context) {
	for _, sb := range m.store.list() {
		if sb.Pauseless || sb.State() != pod.Ready {
			continue // a pause-less pod's State checks its pins itself
		}
		// No answer (readPause's error) is not "not running": no state on a guess.
		if _, running, err := m.readPause(ctx, sb.ID); err == nil && !running {
			sb.setState(pod.NotReady)
		}
	}
}

// readPause reads the sandbox's pause task: its pid while it runs, and whether it
// runs or may (created, pausing, paused). The error says containerd told nothing of
// the task: containerd away, or the task's shim did not answer containerd's state
// call in time (2 s: containerd then answers DeadlineExceeded, or a state of
// "unknown"). A task containerd does not have is not running, not an error.
func (m *Manager) readPause(ctx context.Context, id string) (pid uint32, running bool, err error) {
	_, task, err := ctrd.LoadTask(ctx, m.opts.Client, id)
	if errdefs.IsNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	switch st.Status {
	case client.Running:
		return task.Pid(), true, nil
	case client.Created, client.Pausing, client.Paused:
		return 0, true, nil
	case client.Stopped:
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("pause task %s: containerd tells its state as %q", id, st.Status)
}
