package container

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startedContainer creates and starts a container named name in ts's pod; its
// task's pid is the fake's 4242.
func startedContainer(t *testing.T, ts *testService, name string) *Container {
	t.Helper()
	ctx := context.Background()
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig(name), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
	require.NoError(t, err)
	c, err := ts.containers.get(resp.ContainerId)
	require.NoError(t, err)
	require.Equal(t, uint32(4242), c.Status().Pid)
	return c
}

// dropTask is what a restarted containerd does to a task it finds stopped: it
// deletes it, and tells no exit.
func dropTask(ts *testService, id string) {
	ts.ctrd.mu.Lock()
	defer ts.ctrd.mu.Unlock()
	fc := ts.ctrd.containers[id]
	fc.task.closeFIFOs()
	fc.task = nil
}

// A container that exited while containerd was down, whose task containerd deleted
// when it started again: Resync does not record 255 at once but waits for the exit
// events its shim forwards late. The TaskDelete of the task the container ran (its
// pid) gives the exit code and time; one of another pid does not count. Without any
// event, the exit is 255 after lostExitWait; shutdown does not wait for it.
func TestResyncWaitsForLostExit(t *testing.T) {
	defer func(d time.Duration) { lostExitWait = d }(lostExitWait)
	ctx := context.Background()
	ts := newTestService(t)
	exitedWith := func(c *Container, code int32) func() bool {
		return func() bool {
			st := c.Status()
			return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == code
		}
	}

	lostExitWait = time.Minute
	late := startedContainer(t, ts, "late")
	dropTask(ts, late.ID)
	ts.exits.Resync(ctx)
	ts.exits.Resync(ctx) // a second reconnection: one wait
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, late.Status().State)
	at := time.Unix(1700000000, 0)
	ts.exits.TaskDelete(late.ID, 999, 0, at) // a task of an earlier start
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, late.Status().State)
	ts.exits.TaskDelete(late.ID, 4242, 3, at)
	require.Eventually(t, exitedWith(late, 3), 5*time.Second, 10*time.Millisecond, "%+v", late.Status())
	require.Equal(t, at.UnixNano(), late.Status().FinishedAt)
	require.Eventually(t, func() bool {
		_, waiting := ts.exits.awaiting.Load(late.ID)
		return !waiting
	}, 5*time.Second, 10*time.Millisecond, "the wait ends with the exit")

	lostExitWait = 200 * time.Millisecond
	never := startedContainer(t, ts, "never")
	dropTask(ts, never.ID)
	before := time.Now()
	ts.exits.Resync(ctx)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, never.Status().State)
	require.Eventually(t, exitedWith(never, 255), 5*time.Second, 10*time.Millisecond, "%+v", never.Status())
	require.GreaterOrEqual(t, time.Since(before), lostExitWait)

	lostExitWait = time.Minute
	open := startedContainer(t, ts, "open")
	dropTask(ts, open.ID)
	ts.exits.Resync(ctx)
	closed := make(chan struct{})
	go func() { ts.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for a lost exit")
	}
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, open.Status().State, "left to the next shimd's recovery")
}

// An exit is told twice, by its TaskExit and then by the TaskDelete of shimd's own
// delete of the task, which comes while the first is still being recorded (here the
// output's drain holds it): it is recorded, and published as STOPPED, once.
func TestExitToldTwiceRecordedOnce(t *testing.T) {
	ts := newTestService(t)
	c := startedContainer(t, ts, "twice")
	events, cancel := ts.events.hub.subscribe()
	defer cancel()
	at := time.Now()
	ts.exits.TaskExit(c.ID, c.ID, 3, at)
	ts.exits.TaskDelete(c.ID, 4242, 3, at)
	ts.finishing.Wait()
	require.Equal(t, int32(3), c.Status().ExitCode)
	stopped := 0
	for len(events) > 0 {
		if ev := <-events; ev.ContainerId == c.ID && ev.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
			stopped++
		}
	}
	require.Equal(t, 1, stopped)
}
