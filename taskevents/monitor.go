// Package taskevents follows containerd's task events (exits, deletes and OOM kills)
// in one namespace and hands them to the packages that keep state about tasks; it also
// tells of changes of image records, for the image service's cache. It knows
// nothing of sandboxes or containers: like containerd's CRI plugin, shimd keeps its
// event monitor apart from the stores the events update.
package taskevents

import (
	"context"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
)

// Subscriber is the part of the containerd client the monitor uses.
type Subscriber interface {
	Subscribe(ctx context.Context, filters ...string) (<-chan *events.Envelope, <-chan error)
}

// ExitHandler is told of every task or exec process that exits in the namespace.
type ExitHandler func(containerID, execID string, status uint32, at time.Time)

// OOMHandler is told of an OOM kill in the cgroup of a task in the namespace.
type OOMHandler func(containerID string)

// DeleteHandler is told of every task deleted in the namespace, with the pid and exit
// status of its init process as its shim reports them.
type DeleteHandler func(containerID string, pid, status uint32, at time.Time)

// maxBackoff bounds the wait between two subscriptions while containerd is away: the
// shims forward the exits of that time as soon as it answers again (its first
// subscriber gets them), and a subscription that fails at once costs next to nothing.
const maxBackoff = 500 * time.Millisecond

// Options configures a Monitor. Handlers run on the monitor's goroutine, one event
// at a time, in the order given.
type Options struct {
	Events    Subscriber
	Namespace string
	Exit      []ExitHandler
	OOM       []OOMHandler
	// Delete is told of task deletes. containerd deletes the tasks it finds stopped
	// when it starts again, and the TaskDelete of that delete may be the only report
	// of an exit that happened while containerd was down (the TaskExit the shim
	// could not forward then is dropped after its retries).
	Delete []DeleteHandler
	// Resync runs after every (re)subscription, before the first event is handled:
	// exits that happened while the stream was down were never published.
	Resync []func(ctx context.Context)
	// Images is told of every change of an image record in the namespace.
	Images []func()
	// Live is told true after every (re)subscription, before Resync, and false when
	// the stream broke: what changed meanwhile was never published. Not told when the
	// monitor itself stops.
	Live []func(bool)
}

// Monitor follows task exit and OOM events. Its owner runs Run on one goroutine and
// stops it by cancelling Run's context.
type Monitor struct {
	opts Options
}

// New makes a Monitor; nothing runs until Run.
func New(opts Options) *Monitor { return &Monitor{opts: opts} }

// Run follows the events until ctx ends. When containerd goes away it subscribes
// again (backing off from 100ms to maxBackoff), then runs the Resync handlers.
func (m *Monitor) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if m.follow(ctx) {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// follow runs one subscription until it breaks or ctx ends; it tells whether any
// event arrived. A subscription that fails at once (containerd is not there) runs
// no handler.
func (m *Monitor) follow(ctx context.Context) (gotEvents bool) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	envs, errs := m.opts.Events.Subscribe(sctx, `topic=="/tasks/exit"`, `topic=="/tasks/delete"`, `topic=="/tasks/oom"`, `topic~="^/images/"`)
	select {
	case err := <-errs:
		log.G(ctx).WithError(err).Debug("containerd events: cannot subscribe")
		return false
	default:
	}
	for _, h := range m.opts.Live {
		h(true)
	}
	for _, h := range m.opts.Resync {
		h(ctx)
	}
	for {
		select {
		case env := <-envs:
			gotEvents = true
			if env.Namespace == m.opts.Namespace {
				m.dispatch(env)
			}
		case err := <-errs:
			if ctx.Err() != nil {
				return gotEvents // the monitor stops (shutdown): nothing to tell
			}
			for _, h := range m.opts.Live {
				h(false)
			}
			log.G(ctx).WithError(err).Warn("containerd event stream broke; subscribing again")
			return gotEvents
		}
	}
}

func (m *Monitor) dispatch(env *events.Envelope) {
	ev, err := typeurl.UnmarshalAny(env.Event)
	if err != nil {
		return
	}
	switch e := ev.(type) {
	case *eventstypes.TaskExit:
		for _, h := range m.opts.Exit {
			h(e.ContainerID, e.ID, e.ExitStatus, e.ExitedAt.AsTime())
		}
	case *eventstypes.TaskDelete:
		if e.ID != "" && e.ID != e.ContainerID {
			return // an exec process
		}
		for _, h := range m.opts.Delete {
			h(e.ContainerID, e.Pid, e.ExitStatus, e.ExitedAt.AsTime())
		}
	case *eventstypes.TaskOOM:
		for _, h := range m.opts.OOM {
			h(e.ContainerID)
		}
	case *eventstypes.ImageCreate, *eventstypes.ImageUpdate, *eventstypes.ImageDelete:
		for _, h := range m.opts.Images {
			h()
		}
	}
}
