//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// On containerd 2.x a pod is recorded in containerd's sandbox store, so its
// containers' tasks are loaded into the pod's running shim: the shim binary is
// exec'd ("start") once per pod, not once per container. On 1.6 every task pays
// that exec (the shim then finds the pod's shim by the sandbox-id annotation).
func TestContainersRunInTheirPodsShim(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	shim := filepath.Join(dir, "containerd-shim-runc-v2")
	script := fmt.Sprintf(`#!/bin/sh
for last in "$@"; do :; done
echo "$last" >> %s/actions
exec %s "$@"
`, dir, filepath.Join(harness.Tools().BinDir, "containerd-shim-runc-v2"))
	require.NoError(t, os.WriteFile(shim, []byte(script), 0o755))
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{RuntimeType: shim}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	starts := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "actions"))
		return strings.Count(string(b), "start\n")
	}

	pod := newPod(t, rs, "oneshim")
	if suiteNS() != nil { // the suite's pods are pause-less (SHIMD_PAUSE=when-needed)
		// No pause task: every container's task execs the shim's "start", which
		// starts the pod's shim for the first and finds it by the sandbox-id
		// annotation for the others (on 1.6 and 2.x alike).
		require.Equal(t, 0, starts(), "a pause-less pod starts no shim")
		pod.run(pod.container("a", "sleep", "1000"))
		pod.run(pod.container("b", "sleep", "1000"))
		require.Equal(t, 2, starts())
		require.Len(t, podShims(t, env), 1, "one shim for the pod")
		stopRemove(t, rs, pod.id)
		env.CheckNoLeaks(t)
		return
	}
	require.Equal(t, 1, starts(), "the pause task's shim")
	ids := []string{pod.run(pod.container("a", "sleep", "1000")), pod.run(pod.container("b", "sleep", "1000"))}
	if env.Containerd.MajorVersion() >= 2 {
		require.Equal(t, 1, starts(), "containers of a pod recorded in the sandbox store start no shim")
	} else {
		require.Equal(t, 3, starts(), "containerd 1.6 execs the shim for each task")
	}
	// The pod works as before: exec, stop, restart of shimd, removal.
	resp, err := execSync(t, rs, ids[0], 10, "echo", "hi")
	require.NoError(t, err)
	require.Equal(t, "hi\n", string(resp.Stdout))
	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: ids[1], Timeout: 1})
	require.NoError(t, err)
	rs = restartShimd(t, env)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, ids[0]).State)
	c := pod.container("c", "sleep", "1000")
	pod.rs = rs
	pod.run(c)
	stopRemove(t, rs, pod.id)
	env.CheckNoLeaks(t)
	if env.Containerd.MajorVersion() >= 2 {
		require.Equal(t, 1, starts(), "after a restart of shimd too")
		cl := env.Containerd.Client(t)
		list, err := cl.SandboxStore().List(ctxT(t, 10*time.Second))
		require.NoError(t, err)
		require.Empty(t, list, "the pod's sandbox store record is removed with it")
	}
}
