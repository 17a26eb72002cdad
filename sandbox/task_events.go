package sandbox

import (
	"context"
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
		if _, running := m.pauseState(ctx, sb.ID); !running {
			sb.setState(pod.NotReady)
		}
	}
}

// pauseState reads the sandbox's pause task: its pid while it runs, and whether it
// may still be running. Errors other than not-found (containerd unreachable) count as
// running with an unknown pid: no state is changed on a guess.
func (m *Manager) pauseState(ctx context.Context, id string) (pid uint32, running bool) {
	_, task, err := ctrd.LoadTask(ctx, m.opts.Client, id)
	if err != nil {
		return 0, !errdefs.IsNotFound(err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return 0, !errdefs.IsNotFound(err)
	}
	switch st.Status {
	case client.Running:
		return task.Pid(), true
	case client.Created, client.Pausing, client.Paused:
		return 0, true
	}
	return 0, false
}
