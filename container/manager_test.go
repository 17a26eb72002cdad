package container

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Close, at shutdown, ends the copies of a running container's output but leaves its
// task and FIFOs alone, as the exit of shimd would: the next shimd reattaches to them.
func TestCloseDetachesRunningContainers(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	resp, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	id := resp.ContainerId
	_, err = ts.Start(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	require.NoError(t, err)
	c, err := ts.containers.get(id)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, c.Status().State)
	cio := c.IO()
	require.NotNil(t, cio)
	select {
	case <-cio.done:
		t.Fatal("the copies ended while the task holds its FIFOs open")
	case <-time.After(50 * time.Millisecond):
	}

	ts.Close()
	select {
	case <-cio.done:
	default:
		t.Fatal("the copies still run after Close")
	}
	require.ElementsMatch(t, []string{"snapshot " + id, "container " + id, "task " + id}, ts.ctrd.state(), "the task stays")
	fifos, err := filepath.Glob(filepath.Join(ts.dirs.fifoDir(id), "*", id+"-std*"))
	require.NoError(t, err)
	require.Len(t, fifos, 2, "stdout and stderr FIFOs stay")
	for _, f := range fifos {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), f)
	}
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, c.Status().State)
}
