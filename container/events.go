package container

import (
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventBuffer is how many events a subscriber may fall behind before it is dropped.
const eventBuffer = 1024

// GetContainerEvents streams container and pod sandbox lifecycle events, for the
// kubelet's evented PLEG: CREATED, STARTED, STOPPED and DELETED of each container,
// and of each sandbox under its own id, each with the pod's status and its
// containers' statuses as of the event. A subscriber that falls eventBuffer events
// behind is ended with ResourceExhausted (the kubelet then relists and subscribes
// again): a slow reader never slows the runtime.
func (e *Events) Stream(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ch, cancel := e.hub.subscribe()
	defer cancel()
	ctx := stream.Context()
	log.G(ctx).Info("event subscriber connected")
	defer log.G(ctx).Info("event subscriber gone")
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return fmt.Errorf("event subscriber fell %d events behind: %w", eventBuffer, errdefs.ErrResourceExhausted)
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// Emit publishes an event of id (a container, or a sandbox's own id) in sandbox sbID.
func (e *Events) Emit(id, sbID string, typ runtimeapi.ContainerEventType) {
	e.EmitWith(id, sbID, typ, nil)
}

// EmitWith is Emit with the pod's status given, for a pod that is gone: the kubelet
// drops an event without one.
func (e *Events) EmitWith(id, sbID string, typ runtimeapi.ContainerEventType, pod *runtimeapi.PodSandboxStatus) {
	if !e.hub.active() {
		return
	}
	if pod == nil {
		if sb, err := e.m.opts.Pods.Pod(sbID); err == nil {
			pod = sb.CRIStatus()
		}
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: time.Now().UnixNano(), PodSandboxStatus: pod}
	for _, c := range e.m.containers.inSandbox(sbID) {
		ev.ContainersStatuses = append(ev.ContainersStatuses, toContainerStatus(c, c.Status()))
	}
	e.hub.publish(ev)
}

// Events fans container and pod lifecycle events out to GetContainerEvents
// subscribers, each with the pod's status and its containers' statuses.
type Events struct {
	m   *Manager
	hub eventHub
}

// eventHub fans events out to the current subscribers.
type eventHub struct {
	mu   sync.Mutex
	subs map[chan *runtimeapi.ContainerEventResponse]struct{}
}

func (h *eventHub) active() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

func (h *eventHub) subscribe() (<-chan *runtimeapi.ContainerEventResponse, func()) {
	ch := make(chan *runtimeapi.ContainerEventResponse, eventBuffer)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan *runtimeapi.ContainerEventResponse]struct{}{}
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// publish never blocks: a subscriber whose buffer is full is dropped (its channel
// closed) rather than given a stream with a hole in it.
func (h *eventHub) publish(ev *runtimeapi.ContainerEventResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}
