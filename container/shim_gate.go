package container

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
)

// The containers of a pause-less pod share one runc shim (the
// io.kubernetes.cri.sandbox-id annotation), and nothing else keeps it. Two races
// follow, both of containerd-shim-runc-v2 (containerd 2.4.2):
//   - When the task of the pod's last container is deleted, containerd asks the shim
//     to shut down, and it does, even while a task create that joined it
//     ("containerd-shim-runc-v2 start" found its socket) is under way. That create
//     fails ("ttrpc: closed"), or the task it made dies with the shim.
//   - Two task creates that both find no shim both start one: the second start's
//     socket bind fails, its probe of the first's socket can land between the first's
//     bind and listen and be refused, and it then removes that socket and binds its
//     own. The first shim runs on with a socket no one can reach and no task, for
//     good (the leak check of TestPauselessStartsOfContainersThatExitAtOnce: 24 quick
//     containers started 6 at a time).
//
// So a pause-less pod's task creates and deletes run one at a time (the pod's gate),
// and a create that still meets a shim on its way out, just after a delete, is made
// again: by then the old shim's socket takes no connection, and the start makes a
// new shim. The kubelet starts a pod's containers one after another anyway. A pod
// with a pause needs none of this: the pause keeps its shim, and its own start made
// it before any container's.

// podGates holds the gates of pause-less pods in use, by pod id: a gate lives while
// a task create or delete of its pod holds it or waits for it, so a removed pod
// leaves none behind.
type podGates struct {
	pods  Pods // which pods are pause-less
	mu    sync.Mutex
	gates map[string]*podGate
}

type podGate struct {
	sync.Mutex
	id    string
	users int // holders and waiters, under podGates.mu
}

// take returns the gate of pod id, counted as used until put; nil for a pod with a
// pause, or one that is gone.
func (g *podGates) take(sandboxID string) *podGate {
	p, err := g.pods.Pod(sandboxID)
	if err != nil || !p.Pauseless {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*podGate{}
	}
	l, ok := g.gates[p.ID]
	if !ok {
		l = &podGate{id: p.ID}
		g.gates[p.ID] = l
	}
	l.users++
	return l
}

// put ends a use of gate l; the last one forgets it.
func (g *podGates) put(l *podGate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(g.gates, l.id)
	}
}

// inUse counts the gates held or waited for.
func (g *podGates) inUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.gates)
}

// deleting runs del, a task delete of a container of pod sandboxID, in the pod's
// gate.
func (g *podGates) deleting(sandboxID string, del func() error) error {
	if l := g.take(sandboxID); l != nil {
		defer g.put(l)
		l.Lock()
		defer l.Unlock()
	}
	return del()
}

// shimGone tells whether a task create failed because the shim it joined went away
// under it (or would take no connection): worth making again.
func shimGone(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ttrpc: closed") || strings.Contains(msg, "failed to create TTRPC connection")
}

// creating runs create, a task create of a container of pod sandboxID, in the pod's
// gate; one whose shim went away is made again, up to 5 times in about 0.8 s.
func (g *podGates) creating(ctx context.Context, sandboxID string, create func() error) error {
	l := g.take(sandboxID)
	if l == nil {
		return create()
	}
	defer g.put(l)
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		l.Lock()
		err := create()
		l.Unlock()
		if err == nil || attempt == 5 || !shimGone(err) {
			return err
		}
		log.G(ctx).WithError(err).WithField("attempt", attempt).Info("the pod's shim went away under the task create: made again")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		wait *= 2
	}
}
