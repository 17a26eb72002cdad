package container

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A SIGKILL that meets a container exiting by itself fails in the shim, which goes
// away under the call ("ttrpc: closed"). The exit that follows settles it: the stop
// succeeds and the container is EXITED, not an Unknown error for the kubelet.
func TestStopContainerKillRacesExit(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	id := resp.ContainerId
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	require.NoError(t, err)

	ts.ctrd.kill = func(task *fakeTask, sig syscall.Signal) error {
		require.Equal(t, syscall.SIGKILL, sig)
		go func() { // the process is gone: its output ends, its exit is published
			time.Sleep(100 * time.Millisecond)
			task.closeFIFOs()
			ts.exits.TaskExit(id, id, 0, time.Now()) // the init process: exec id = container id
		}()
		return errors.New("ttrpc: closed")
	}
	_, err = ts.Stop(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0})
	require.NoError(t, err)
	c, err := ts.containers.get(id)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, c.Status().State)

	// A kill that fails while the container keeps running is still an error.
	resp, err = ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("d"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
	require.NoError(t, err)
	ts.ctrd.kill = func(*fakeTask, syscall.Signal) error { return errors.New("ttrpc: closed") }
	_, err = ts.Stop(ctx, &runtimeapi.StopContainerRequest{ContainerId: resp.ContainerId, Timeout: 0})
	require.ErrorContains(t, err, "kill container")
}
