//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// A restart of shimd while the pods' shims do not answer (a node too busy, a shim
// stuck for a while): containerd gives up on a task's state after 2 s and answers
// DeadlineExceeded, which says nothing of whether the task runs. Recovery must not
// take that for "not running": the pod stays READY (else the kubelet kills and
// recreates it), the running container's output is reattached to its log once the
// shim answers, and the pod takes new containers (which need its pause pid). Here
// every shim is stopped (SIGSTOP) across the whole of shimd's kill -9, restart and
// recovery, and let go on only after shimd serves.
func TestKill9ShimdWhileShimsBusy(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPodOf(t, rs, pausePodConfig("busy-shims")) // its pause pid is at stake
	running := pod.run(pod.container("ticker", "sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.1; done"))
	exited := pod.run(pod.container("quitter", "sh", "-c", "exit 4"))
	waitExited(t, rs, exited)
	before := containerStatus(t, rs, running)
	waitLog(t, before.LogPath, "tick3\n")
	podBefore := podStatus(t, rs, pod.id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podBefore.State)

	env.Shimd.Kill9()
	shims, cont := stopShims(t, env)
	stopped := time.Now()
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	waitReady(t, rs)
	t.Logf("%d shims stopped; shimd recovered %s after the stop", len(shims), time.Since(stopped).Round(time.Millisecond))
	cont()

	// The pod is READY and keeps its pause pid: a new container starts in it.
	st := podStatus(t, rs, pod.id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, st.State, "the pod after a recovery that could not read its pause task's state")
	requireSurvivedRestart(t, rs, running, exited, before)
	// Its output reaches the log again.
	data, _ := os.ReadFile(before.LogPath)
	n := strings.Count(string(data), "tick")
	waitLog(t, before.LogPath, "tick"+strconv.Itoa(n+10)+"\n")
	late := pod.run(pod.container("late", "sh", "-c", "echo late-started; sleep 3600"))
	waitLog(t, containerStatus(t, rs, late).LogPath, "late-started\n")
	stopRemove(t, rs, pod.id)
	// The states were unknown during recovery, and read after it.
	log, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	for _, line := range []string{"pause task's state unknown", "task's state unknown: adopted once containerd tells it", "container adopted"} {
		require.Contains(t, string(log), line, "shimd's log")
	}
}

// A cleanup that recovery cannot finish because the shim it goes through does not
// answer: a container whose creation a crash cut short (its status file missing)
// has a running task in a pod whose shim is stopped (SIGSTOP) across shimd's
// restart. containerd bounds no delete or kill through a shim, so recovery gives
// the removal cleanup.RecoveryAttempt (10 s), serves, and leaves it to the cleanup
// queue, which removes the container and its writable layer once the shim goes
// on. The pod and its other container are untouched.
func TestRecoveryCleanupRetriedPastStuckShim(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "stuck-cleanup")
	keeper := pod.run(pod.container("keeper", "sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.1; done"))
	victim := pod.run(pod.container("victim", "sleep", "3600"))
	before := containerStatus(t, rs, keeper)
	waitLog(t, before.LogPath, "tick3\n")

	env.Shimd.Kill9()
	// The victim's creation never finished, as far as recovery can tell.
	require.NoError(t, os.Remove(filepath.Join(env.Shimd.RootDir(), "containers", victim, "status.json")))
	_, cont := stopShims(t, env)
	start := time.Now()
	env.Shimd.StartUnrecovered(t)
	rs = env.Shimd.Runtime(t)
	waitReady(t, rs)
	t.Logf("shimd recovered %s after its start, its removal of the victim cut short", time.Since(start).Round(time.Millisecond))
	cl := env.Containerd.Client(t)
	_, err := cl.ContainerService().Get(ctxT(t, 10*time.Second), victim)
	require.NoError(t, err, "the victim is still in containerd while its shim is stopped")
	for _, c := range listContainers(t, rs) {
		require.NotEqual(t, victim, c.Id, "recovery does not take the victim back")
	}

	cont()
	require.Eventually(t, func() bool {
		_, err := cl.ContainerService().Get(ctxT(t, 10*time.Second), victim)
		return errdefs.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond, "the queue removes the victim once its shim answers")
	_, err = cl.SnapshotService("overlayfs").Stat(ctxT(t, 10*time.Second), victim)
	require.True(t, errdefs.IsNotFound(err), "its writable layer is gone too: %v", err)
	log, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(log), `msg="done on a retry" attempts=`)
	require.Contains(t, string(log), `cleanup="container `+victim+`"`)

	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, pod.id).State)
	st := containerStatus(t, rs, keeper)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.State)
	require.Equal(t, before.StartedAt, st.StartedAt)
	data, _ := os.ReadFile(before.LogPath)
	n := strings.Count(string(data), "tick")
	waitLog(t, before.LogPath, "tick"+strconv.Itoa(n+10)+"\n")
	stopRemove(t, rs, pod.id)
}

// stopShims stops (SIGSTOP) every shim of env's containerd; cont lets them go on,
// and runs at the test's end in any case.
func stopShims(t *testing.T, env *harness.Env) (shims []int, cont func()) {
	t.Helper()
	shims, err := harness.ShimPIDs(env.Containerd.Address())
	require.NoError(t, err)
	require.NotEmpty(t, shims)
	cont = func() {
		for _, pid := range shims {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	for _, pid := range shims {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	}
	return shims, cont
}
