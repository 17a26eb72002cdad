package sandbox

import (
	"context"
	"time"

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
		// No answer (pauseTasks.read's error) is not "not running": no state on a guess.
		if _, running, err := m.tasks.read(ctx, sb.ID); err == nil && !running {
			sb.setState(pod.NotReady)
		}
	}
}
