package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// store keeps the sandboxes shimd knows and the names reserved for them.
//
// Lock order: store.mu before Sandbox.mu; store.mu is never held across a containerd
// or CNI call.
type store struct {
	mu    sync.Mutex
	byID  map[string]*Sandbox
	names map[string]*reservation
}

// reservation holds a name from the moment Run starts until Remove. done is closed
// when Run has finished; then id names the sandbox, or err says why Run failed.
type reservation struct {
	done chan struct{}
	id   string
	err  error
}

func newStore() *store {
	return &store{byID: map[string]*Sandbox{}, names: map[string]*reservation{}}
}

// reserve takes the name for a new Run. If the name is taken it returns the existing
// reservation instead, so a retried RunPodSandbox can wait for the first and reuse it.
func (s *store) reserve(name string) (r *reservation, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.names[name]; ok {
		return r, false
	}
	r = &reservation{done: make(chan struct{})}
	s.names[name] = r
	return r, true
}

// finish records the outcome of Run: the sandbox on success, or frees the name.
func (s *store) finish(name string, r *reservation, sb *Sandbox, err error) {
	s.mu.Lock()
	if err != nil {
		delete(s.names, name)
		r.err = err
	} else {
		r.id = sb.ID
		s.byID[sb.ID] = sb
	}
	s.mu.Unlock()
	close(r.done)
}

// wait blocks until the reservation's Run has finished.
func (r *reservation) wait(ctx context.Context) (string, error) {
	select {
	case <-r.done:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// add inserts a recovered sandbox.
func (s *store) add(sb *Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &reservation{done: make(chan struct{}), id: sb.ID}
	close(r.done)
	s.names[sb.Name] = r
	s.byID[sb.ID] = sb
}

// delete forgets a removed sandbox and frees its name.
func (s *store) delete(sb *Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sb.ID)
	if r, ok := s.names[sb.Name]; ok && r.id == sb.ID {
		delete(s.names, sb.Name)
	}
}

// get finds a sandbox by full id or unique id prefix.
func (s *store) get(idOrPrefix string) (*Sandbox, error) {
	if idOrPrefix == "" {
		return nil, fmt.Errorf("sandbox id is empty: %w", errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.byID[idOrPrefix]; ok {
		return sb, nil
	}
	var found *Sandbox
	for id, sb := range s.byID {
		if strings.HasPrefix(id, idOrPrefix) {
			if found != nil {
				return nil, fmt.Errorf("sandbox id prefix %q is ambiguous: %w", idOrPrefix, errdefs.ErrInvalidArgument)
			}
			found = sb
		}
	}
	if found == nil {
		return nil, fmt.Errorf("sandbox %q: %w", idOrPrefix, errdefs.ErrNotFound)
	}
	return found, nil
}

// list returns all sandboxes, oldest first.
func (s *store) list() []*Sandbox {
	s.mu.Lock()
	out := make([]*Sandbox, 0, len(s.byID))
	for _, sb := range s.byID {
		out = append(out, sb)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}
