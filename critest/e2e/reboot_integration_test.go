//go:build integration

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// After a reboot of the node, a pod's network namespace (and a pause-less pod's
// running marker) is gone with /run, while its IPAM lease and libcni's cache are
// on disk: recovery must not take the pod for stopped, so that StopPodSandbox
// runs CNI DEL, or the address is never released (found by critest/kubeadm's
// worker reboot: every pod leaked its lease). Both pause modes.
func TestRebootReleasesPodAddresses(t *testing.T) {
	for _, mode := range []string{"always", "when-needed"} {
		t.Run(mode, func(t *testing.T) {
			requireRoot(t)
			env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Pause: mode}})
			pull(t, env, busyboxImage)
			rs := env.Shimd.Runtime(t)
			cfg := podConfig("reboot")
			cfg.LogDirectory = t.TempDir()
			cfg.Linux.SecurityContext.NamespaceOptions = ownPID() // pause-less in when-needed
			pod := &podFixture{t: t, rs: rs, id: runPod(t, rs, cfg), cfg: cfg, logDir: cfg.LogDirectory}
			ctr := pod.run(pod.container("sleeper", "sleep", "3600"))
			require.Len(t, leases(t, env.CNI.DataDir, env.CNI.Name), 1)

			rebootNode(t, env)

			rs = env.Shimd.Runtime(t)
			require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, pod.id).State)
			st := containerStatus(t, rs, ctr)
			require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
			require.EqualValues(t, 255, st.ExitCode, "a container whose task died with the node")
			require.Len(t, leases(t, env.CNI.DataDir, env.CNI.Name), 1, "the lease is on disk until the pod is stopped")
			_, err := rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
			require.NoError(t, err)
			require.Empty(t, leases(t, env.CNI.DataDir, env.CNI.Name), "StopPodSandbox released the address")
			stopRemove(t, rs, pod.id) // a second stop, then the remove
			env.CheckNoLeaks(t)
		})
	}
}

// rebootNode plays a power cut and boot on env's node: shimd, containerd, the
// shims and every process of the pods killed with SIGKILL; every mount under the
// test's directory gone (pinned namespaces, /dev/shm, rootfs mounts, the shared
// pause root) and what a node keeps on tmpfs removed (containerd's state and shim
// sockets, runc's state, shimd's state_dir); then containerd and shimd started
// again. On-disk state stays: containerd's root, shimd's root_dir, the CNI cache
// and host-local's leases.
func rebootNode(t *testing.T, env *harness.Env) {
	t.Helper()
	var pids []int
	for _, c := range listContainers(t, env.Shimd.Runtime(t)) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			resp, err := env.Shimd.Runtime(t).ContainerStatus(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
			require.NoError(t, err)
			var info struct{ Pid int }
			require.NoError(t, json.Unmarshal([]byte(resp.Info["info"]), &info))
			require.NotZero(t, info.Pid, "pid of %s", c.Id)
			pids = append(pids, info.Pid)
		}
	}
	for _, p := range listPods(t, env.Shimd.Runtime(t), nil) {
		if pid, ok := podInfo(t, env.Shimd.Runtime(t), p.Id)["pid"].(float64); ok && pid > 0 {
			pids = append(pids, int(pid))
		}
	}
	require.NotEmpty(t, pids)
	env.Shimd.Kill9()
	env.Containerd.Kill()
	for _, pid := range append(podShims(t, env), pids...) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if harness.Live(pid) {
				return false
			}
		}
		return len(podShims(t, env)) == 0
	}, 10*time.Second, 50*time.Millisecond, "the pods' processes and shims die")

	// Every mount under the test's directory, deepest first.
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], env.Base+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	f.Close()
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		require.NoError(t, unix.Unmount(m, unix.MNT_DETACH), m)
	}
	for _, d := range []string{env.Containerd.State(), filepath.Join(env.Containerd.Dir(), "s"),
		filepath.Join(env.Base, "runc"), env.Shimd.StateDir()} {
		require.NoError(t, os.RemoveAll(d))
	}
	t.Logf("reboot: %d processes and shims killed, %d mounts gone", len(pids), len(mounts))
	env.Containerd.Restart(t)
	env.Shimd.Start(t)
}
