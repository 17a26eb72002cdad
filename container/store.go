package container

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerStore keeps the containers shimd knows and reserves their names.
type containerStore struct {
	mu    sync.Mutex
	byID  map[string]*Container
	names map[string]string // name -> id ("" while CreateContainer runs)
	// busy: name -> closed when the CreateContainer that reserved it ends (add or
	// release); only while it runs.
	busy map[string]chan struct{}
}

func newContainerStore() *containerStore {
	return &containerStore{byID: map[string]*Container{}, names: map[string]string{}, busy: map[string]chan struct{}{}}
}

// reserve takes a name for a new container; AlreadyExists when it is taken. While
// the CreateContainer that took it still runs, busy is closed when that one ends.
func (s *containerStore) reserve(name string) (busy <-chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.names[name]; ok {
		if ch, ok := s.busy[name]; ok {
			return ch, fmt.Errorf("container name %q is reserved by a CreateContainer still at work: %w", name, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("container name %q is in use by container %q: %w", name, id, errdefs.ErrAlreadyExists)
	}
	s.names[name] = ""
	s.busy[name] = make(chan struct{})
	return nil, nil
}

// done ends the reservation of name: its waiters go on. Under s.mu.
func (s *containerStore) done(name string) {
	if ch, ok := s.busy[name]; ok {
		close(ch)
		delete(s.busy, name)
	}
}

// retried returns the container named name if it is still CREATED with the same
// config: a CreateContainer for it again is a retry, not a conflict.
func (s *containerStore) retried(name string, cfg *runtimeapi.ContainerConfig) *Container {
	s.mu.Lock()
	c := s.byID[s.names[name]]
	s.mu.Unlock()
	if c == nil || c.Status().State != runtimeapi.ContainerState_CONTAINER_CREATED || !proto.Equal(c.Config, cfg) {
		return nil
	}
	return c
}

func (s *containerStore) release(name string) {
	s.mu.Lock()
	delete(s.names, name)
	s.done(name)
	s.mu.Unlock()
}

func (s *containerStore) add(c *Container) {
	s.mu.Lock()
	s.byID[c.ID] = c
	s.names[c.Name] = c.ID
	s.done(c.Name)
	s.mu.Unlock()
}

func (s *containerStore) delete(c *Container) {
	s.mu.Lock()
	delete(s.byID, c.ID)
	if s.names[c.Name] == c.ID {
		delete(s.names, c.Name)
	}
	s.mu.Unlock()
}

// get finds a container by full id or unique id prefix.
func (s *containerStore) get(idOrPrefix string) (*Container, error) {
	if idOrPrefix == "" {
		return nil, fmt.Errorf("container id is empty: %w", errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byID[idOrPrefix]; ok {
		return c, nil
	}
	var found *Container
	for id, c := range s.byID {
		if strings.HasPrefix(id, idOrPrefix) {
			if found != nil {
				return nil, fmt.Errorf("container id prefix %q is ambiguous: %w", idOrPrefix, errdefs.ErrInvalidArgument)
			}
			found = c
		}
	}
	if found == nil {
		return nil, fmt.Errorf("container %q: %w", idOrPrefix, errdefs.ErrNotFound)
	}
	return found, nil
}

// list returns all containers, oldest first.
func (s *containerStore) list() []*Container {
	s.mu.Lock()
	out := make([]*Container, 0, len(s.byID))
	for _, c := range s.byID {
		out = append(out, c)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// inSandbox returns the containers of one pod, oldest first. It filters under the
// lock, so a pod's status costs the pod's containers, not the node's, to sort.
func (s *containerStore) inSandbox(sandboxID string) []*Container {
	var out []*Container
	s.mu.Lock()
	for _, c := range s.byID {
		if c.SandboxID == sandboxID {
			out = append(out, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// running finds a container and checks that it runs.
func (s *containerStore) running(id string) (*Container, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, err
	}
	if st := c.Status().State; st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	return c, nil
}
