package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/cleanup"
)

// A recovery that cannot read a running container's task (its shim did not answer
// containerd's state call in time: DeadlineExceeded) decides nothing: the container
// stays RUNNING, and the cleanup queue adopts it once containerd answers, so that
// its output reaches its log again.
func TestAdoptRetriedWhileTaskStateUnknown(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	q := cleanup.New()
	q.First, q.Max = 10*time.Millisecond, 20*time.Millisecond
	ts.useCleanups(q)
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	id := resp.ContainerId
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	require.NoError(t, err)
	c, err := ts.containers.get(id)
	require.NoError(t, err)
	// shimd restarts: its copy of the output ends (as at Close); the task runs on.
	old := c.IO()
	old.detach()
	<-old.done
	c.setIO(nil)

	ts.ctrd.mu.Lock()
	ts.ctrd.loadTaskErr = fmt.Errorf("fake: get state: %w", context.DeadlineExceeded)
	task := ts.ctrd.containers[id].task
	ts.ctrd.mu.Unlock()
	err = ts.adopt(ctx, c)
	require.Error(t, err)
	require.True(t, errdefs.IsDeadlineExceeded(err), "%v", err)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, c.Status().State, "nothing decided on an unknown state")
	require.Nil(t, c.IO())

	ts.adoptLater(c)
	require.Equal(t, []string{"adopt container " + id}, q.Pending())
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go q.Run(rctx)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, []string{"adopt container " + id}, q.Pending(), "retried while containerd cannot tell")
	require.Nil(t, c.IO())

	ts.ctrd.mu.Lock()
	ts.ctrd.loadTaskErr = nil
	ts.ctrd.mu.Unlock()
	require.Eventually(t, func() bool { return len(q.Pending()) == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NotNil(t, c.IO(), "adopted")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, c.Status().State)
	_, err = task.fifos[0].Write([]byte("after the restart\n"))
	require.NoError(t, err)
	logPath := filepath.Join(ts.logDir, "c.log")
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(logPath)
		return strings.Contains(string(data), "stdout F after the restart\n")
	}, 10*time.Second, 10*time.Millisecond, "the output reaches the log again")
}

// A container removed while its adoption waits is left alone by the retry.
func TestAdoptLaterSkipsRemovedContainer(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	q := cleanup.New()
	q.First = 10 * time.Millisecond
	ts.useCleanups(q)
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	c, err := ts.containers.get(resp.ContainerId)
	require.NoError(t, err)
	ts.ctrd.mu.Lock()
	ts.ctrd.loadTaskErr = fmt.Errorf("fake: get state: %w", context.DeadlineExceeded)
	ts.ctrd.mu.Unlock()
	ts.adoptLater(c)
	_, err = ts.Remove(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ID})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go q.Run(rctx)
	require.Eventually(t, func() bool { return len(q.Pending()) == 0 }, 10*time.Second, 10*time.Millisecond)
}
