package sandbox

import (
	"context"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"

	"github.com/shimd/shimd/record"
)

// ExitHandler is told of every task or exec process that exits in shimd's namespace.
type ExitHandler func(containerID, execID string, status uint32, at time.Time)

// OnExit registers h; call before Monitor starts.
func (m *Manager) OnExit(h ExitHandler) {
	m.exitMu.Lock()
	m.onExit = append(m.onExit, h)
	m.exitMu.Unlock()
}

// OOMHandler is told of an OOM kill in the cgroup of a task in shimd's namespace.
type OOMHandler func(containerID string)

// OnOOM registers h; call before Monitor starts.
func (m *Manager) OnOOM(h OOMHandler) {
	m.exitMu.Lock()
	m.onOOM = append(m.onOOM, h)
	m.exitMu.Unlock()
}

// OnResync registers h, run after every (re)subscription to containerd's events:
// exits that happened while the stream was down were never published.
func (m *Manager) OnResync(h func(ctx context.Context)) {
	m.exitMu.Lock()
	m.onResync = append(m.onResync, h)
	m.exitMu.Unlock()
}

// Monitor follows containerd's task exit events until ctx ends. When containerd goes
// away it subscribes again, and then re-reads the state of every sandbox, since exits
// that happened meanwhile were never published to it. Owned by the daemon; stops with ctx.
func (m *Manager) Monitor(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		events, errs := m.opts.Client.Subscribe(sctx, `topic=="/tasks/exit"`, `topic=="/tasks/oom"`)
		m.resync(ctx)
		m.exitMu.Lock()
		resyncs := append([]func(context.Context){}, m.onResync...)
		m.exitMu.Unlock()
		for _, h := range resyncs {
			h(ctx)
		}
		m.SweepLive(ctx)
	loop:
		for {
			select {
			case env := <-events:
				backoff = 100 * time.Millisecond
				if env.Namespace != m.opts.Namespace {
					continue
				}
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				switch e := ev.(type) {
				case *eventstypes.TaskExit:
					m.handleExit(e.ContainerID, e.ID, e.ExitStatus, e.ExitedAt.AsTime())
				case *eventstypes.TaskOOM:
					m.exitMu.Lock()
					handlers := append([]OOMHandler(nil), m.onOOM...)
					m.exitMu.Unlock()
					for _, h := range handlers {
						h(e.ContainerID)
					}
				}
			case err := <-errs:
				if ctx.Err() == nil {
					log.G(ctx).WithError(err).Warn("containerd event stream broke; subscribing again")
				}
				break loop
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (m *Manager) handleExit(containerID, execID string, status uint32, at time.Time) {
	if containerID == execID {
		if sb, err := m.store.get(containerID); err == nil && sb.ID == containerID {
			sb.setState(StateNotReady)
		}
	}
	m.exitMu.Lock()
	handlers := append([]ExitHandler(nil), m.onExit...)
	m.exitMu.Unlock()
	for _, h := range handlers {
		h(containerID, execID, status, at)
	}
}

// resync marks NOTREADY every READY sandbox whose pause process is no longer running.
func (m *Manager) resync(ctx context.Context) {
	for _, sb := range m.store.list() {
		if sb.State() != StateReady {
			continue
		}
		if _, running := m.pauseState(ctx, sb.ID); !running {
			sb.setState(StateNotReady)
		}
	}
}

// pauseState reads the sandbox's pause task: its pid while it runs, and whether it
// may still be running. Errors other than not-found (containerd unreachable) count as
// running with an unknown pid: no state is changed on a guess.
func (m *Manager) pauseState(ctx context.Context, id string) (pid uint32, running bool) {
	_, task, err := record.LoadTask(ctx, m.opts.Client, id)
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
