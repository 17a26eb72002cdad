package container

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
)

// The containers of a pause-less pod share one runc shim (the
// io.kubernetes.cri.sandbox-id annotation), and nothing else keeps it: when the task
// of its last container is deleted, containerd asks the shim to shut down, and it
// does, even while a task create that joined it ("containerd-shim-runc-v2 start"
// found its socket) is under way. That create fails ("ttrpc: closed"), or the task it
// made dies with the shim. So in such a pod a task create and a task delete never
// overlap (the pod's gate: creates share it, a delete holds it alone), and a create
// that still meets a shim on its way out, just after a delete, is made again: by
// then the old shim's socket takes no connection, and the start makes a new shim.
// A pod with a pause needs none of this: the pause keeps its shim.

// podGates holds the gates of pause-less pods, by pod id.
type podGates struct {
	mu    sync.Mutex
	gates map[string]*sync.RWMutex
}

// gate returns the gate of pod id; nil for a pod with a pause, or one that is gone.
func (s *Manager) gate(sandboxID string) *sync.RWMutex {
	p, err := s.opts.Pods.Pod(sandboxID)
	if err != nil || !p.Pauseless {
		return nil
	}
	g := &s.gates
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.RWMutex{}
	}
	l, ok := g.gates[p.ID]
	if !ok {
		l = &sync.RWMutex{}
		g.gates[p.ID] = l
	}
	return l
}

// dropGate forgets the gate of a removed pod.
func (s *Manager) dropGate(sandboxID string) {
	s.gates.mu.Lock()
	delete(s.gates.gates, sandboxID)
	s.gates.mu.Unlock()
}

// deletingTask runs del, a task delete of a container of pod sandboxID, alone in the
// pod's gate.
func (s *Manager) deletingTask(sandboxID string, del func() error) error {
	if l := s.gate(sandboxID); l != nil {
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

// creatingTask runs create, a task create of a container of pod sandboxID, in the
// pod's gate beside other creates; one whose shim went away is made again, up to 5
// times in about 0.8 s.
func (s *Manager) creatingTask(ctx context.Context, sandboxID string, create func() error) error {
	l := s.gate(sandboxID)
	if l == nil {
		return create()
	}
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		l.RLock()
		err := create()
		l.RUnlock()
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
