//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// A pause process that no task of containerd's accounts for any more is killed when
// the pod stops, and its cgroup goes. The crash soak met one: the runc init of a
// pause task's create that finished after containerd, killed during RunPodSandbox,
// had given up on it; the shim then exited and nothing would ever stop it. Here the
// pod's shim is killed while containerd is down and its bundle removed, so that
// containerd, started again, has no task and runs no cleanup for it; the pause
// process lives on in its cgroup, a child of no shim.
func TestPauseProcessWithoutTaskIsKilled(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	waitReady(t, rs)
	resp, err := rs.RunPodSandbox(ctxT(t, time.Minute), &runtimeapi.RunPodSandboxRequest{Config: pausePodConfig("orphan-pause")})
	require.NoError(t, err)
	id := resp.PodSandboxId
	f, ok := podInfo(t, rs, id)["pid"].(float64)
	require.True(t, ok && f > 0, "the pause's pid")
	pause := int(f)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pause))
	require.NoError(t, err)
	require.Contains(t, string(data), id, "the pause runs in a cgroup named after the pod")

	shims := shimsOf(t, env, id)
	require.Len(t, shims, 1)
	shim := shims[0]
	env.Containerd.Kill()
	require.NoError(t, syscall.Kill(shim, syscall.SIGKILL))
	bundle := filepath.Join(env.Containerd.State(), "io.containerd.runtime.v2.task", env.Containerd.Namespace(), id)
	_ = syscall.Unmount(filepath.Join(bundle, "rootfs"), 0)
	require.NoError(t, os.RemoveAll(bundle))
	env.Containerd.Restart(t)
	require.True(t, harness.Live(pause), "the pause outlives its shim and containerd's record of its task")

	_, err = rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !harness.Live(pause) }, 10*time.Second, 50*time.Millisecond,
		"the pause process without a task after StopPodSandbox")
	_, err = rs.RemovePodSandbox(ctxT(t, time.Minute), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	require.NoError(t, err)
	// The harness's leak check follows: the pod's cgroup must be gone.
}
