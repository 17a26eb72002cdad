//go:build integration

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// eventLog collects what GetContainerEvents streams.
type eventLog struct {
	mu     sync.Mutex
	events []*runtimeapi.ContainerEventResponse
}

func (l *eventLog) of(id string) []*runtimeapi.ContainerEventResponse {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*runtimeapi.ContainerEventResponse
	for _, e := range l.events {
		if e.ContainerId == id {
			out = append(out, e)
		}
	}
	return out
}

func (l *eventLog) types(id string) []runtimeapi.ContainerEventType {
	var out []runtimeapi.ContainerEventType
	for _, e := range l.of(id) {
		// Duplicates are allowed (a sandbox's pause exit and StopPodSandbox both
		// report STOPPED); the order of the distinct types is what counts.
		if len(out) == 0 || out[len(out)-1] != e.ContainerEventType {
			out = append(out, e.ContainerEventType)
		}
	}
	return out
}

// GetContainerEvents streams the lifecycle of a pod and its container, each event
// carrying the pod's status and its containers' statuses as of then.
func TestContainerEvents(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rs.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	require.NoError(t, err)
	var log eventLog
	done := make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				done <- err
				return
			}
			log.mu.Lock()
			log.events = append(log.events, ev)
			log.mu.Unlock()
		}
	}()
	// The stream is open once the server has it; a pod run before that could be missed.
	time.Sleep(200 * time.Millisecond)

	pod := newPod(t, rs, "events")
	id := pod.run(pod.container("quick", "sh", "-c", "exit 3"))
	waitExited(t, rs, id)
	_, err = rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: id})
	require.NoError(t, err)
	stopRemove(t, rs, pod.id)

	C := runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	S := runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	X := runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	D := runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	require.Eventually(t, func() bool {
		return len(log.types(pod.id)) == 4 && len(log.types(id)) == 4
	}, 30*time.Second, 50*time.Millisecond, "pod events %v, container events %v", log.types(pod.id), log.types(id))
	require.Equal(t, []runtimeapi.ContainerEventType{C, S, X, D}, log.types(pod.id))
	require.Equal(t, []runtimeapi.ContainerEventType{C, S, X, D}, log.types(id))

	for _, e := range log.of(id) {
		require.Equal(t, pod.id, e.PodSandboxStatus.GetId(), "event %v", e.ContainerEventType)
		require.NotZero(t, e.CreatedAt)
		if e.ContainerEventType == X {
			require.Len(t, e.ContainersStatuses, 1)
			st := e.ContainersStatuses[0]
			require.Equal(t, id, st.Id)
			require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
			require.Equal(t, int32(3), st.ExitCode)
		}
		if e.ContainerEventType == D {
			require.Empty(t, e.ContainersStatuses, "a deleted container is still listed")
		}
	}
	// The kubelet drops an event without the pod's status, also when the pod is gone.
	for _, e := range log.of(pod.id) {
		require.Equal(t, pod.id, e.PodSandboxStatus.GetId(), "event %v", e.ContainerEventType)
		require.NotNil(t, e.PodSandboxStatus.GetMetadata(), "event %v", e.ContainerEventType)
	}
	last := log.of(pod.id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, last[len(last)-2].PodSandboxStatus.GetState(), "STOPPED")

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream did not end with its context")
	}
}
