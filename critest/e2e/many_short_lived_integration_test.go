//go:build integration

package e2e

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Sixty containers that print one line and exit, created and started at once in one
// pod (a Job-like pod, or a burst of init-style work): every create and start
// succeeds, and every container ends EXITED with exit code 0 and its line in its log.
// All of them run in the pod's one shim, so its exit handling sees them all together.
//
// Each container has its own PID namespace, as the kubelet gives by default. In a
// pod that shares one PID namespace (shareProcessNamespace), containerd's runc shim
// handles each container's exit by running `runc kill --all` on the one goroutine
// that also receives every child exit; with 32 or more exits pending, its reaper then
// passes on about one exit per second and the pod's starts take up to minutes
// (docs/operating.md, "Limits"). That case is not tested here.
func TestManyShortLivedContainersInOnePod(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPod(t, rs, "many")
	defer stopRemove(t, rs, p.id)

	const n = 60
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := p.container(fmt.Sprintf("c%d", i), "sh", "-c", fmt.Sprintf("echo done-%d", i))
			cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
			resp, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{
				PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
			if err != nil {
				errs[i] = fmt.Errorf("create c%d: %w", i, err)
				return
			}
			ids[i] = resp.ContainerId
			if _, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
				errs[i] = fmt.Errorf("start c%d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, id := range ids {
		st := waitExited(t, rs, id)
		require.Equal(t, int32(0), st.ExitCode, "c%d", i)
		waitLog(t, filepath.Join(p.logDir, fmt.Sprintf("c%d.log", i)), fmt.Sprintf("stdout F done-%d\n", i))
	}
	resp, err := rs.ListContainers(ctxT(t, time.Minute), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: p.id}})
	require.NoError(t, err)
	require.Len(t, resp.Containers, n)
}
