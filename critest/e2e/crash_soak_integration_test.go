//go:build integration

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestCrashSoak runs pod lifecycles (pod, two containers, exec, stop, remove) while
// shimd or containerd is killed with SIGKILL at a random moment and started again.
// Afterwards it cleans up through the CRI only, as the kubelet's garbage collector
// would (list, stop, remove), and then nothing may be left: no pod, container, shim,
// cgroup, lease, netns, IP, mount or snapshot; shimd never panicked; no answer was
// Internal. CRASH_SOAK_ROUNDS (default 12) sets the number of crashes; the seed is
// logged and CRASH_SOAK_SEED repeats a run.
func TestCrashSoak(t *testing.T) {
	requireRoot(t)
	rounds := envInt("CRASH_SOAK_ROUNDS", 12)
	seed := int64(envInt("CRASH_SOAK_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("rounds %d, seed %d (CRASH_SOAK_SEED=%d repeats it)", rounds, seed, seed)
	rng := rand.New(rand.NewSource(seed))
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	results := map[codes.Code]int{}
	kills := map[string]int{}

	for round := 0; round < rounds; round++ {
		done := make(chan []error, 1)
		go func(round int) { done <- lifecycle(rs, round) }(round)
		// A lifecycle takes about 3.5 s here (the two stops wait out their 1 s
		// timeout): the crash falls anywhere in it, or after it.
		time.Sleep(time.Duration(rng.Intn(4000)) * time.Millisecond)
		if rng.Intn(10) < 7 {
			kills["shimd"]++
			env.Shimd.Kill9()
			env.Shimd.Start(t)
		} else {
			kills["containerd"]++
			env.Containerd.Kill()
			env.Containerd.Restart(t)
		}
		select {
		case errs := <-done:
			for _, err := range errs {
				results[status.Code(err)]++
				require.NotEqual(t, codes.Internal, status.Code(err), "round %d: %v", round, err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("round %d: the lifecycle hangs", round)
		}
		waitRuntimeReady(t, rs)
	}
	t.Logf("kills: %v; answers by code: %v", kills, results)

	// The kubelet's view: whatever is listed gets stopped and removed.
	ctx := ctxT(t, 5*time.Minute)
	cs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	for _, c := range cs.Containers {
		_, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id})
		require.NoError(t, err, "remove container %s", c.Id)
	}
	for _, p := range listPods(t, rs, nil) {
		stopRemove(t, rs, p.Id)
	}
	env.AssertNoLeaks(t, time.Minute)
	logData, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.NotContains(t, string(logData), "panic", "shimd's log")
}

// lifecycle runs one pod's life through the CRI and returns the errors it met (a
// crash cuts it short wherever it is; later steps then fail or are skipped).
func lifecycle(rs runtimeapi.RuntimeServiceClient, round int) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	fail := func(err error) bool {
		if err != nil {
			errs = append(errs, err)
		}
		return err != nil
	}
	cfg := podConfig(fmt.Sprintf("soak%d", round))
	cfg.LogDirectory = os.TempDir()
	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if fail(err) {
		return errs
	}
	var ids []string
	for _, name := range []string{"a", "b"} {
		c, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, SandboxConfig: cfg,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: name},
				Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
				Command:  []string{"sleep", "1000"},
				LogPath:  fmt.Sprintf("soak-%d-%s-%d.log", round, name, time.Now().UnixNano()),
			}})
		if fail(err) {
			break
		}
		ids = append(ids, c.ContainerId)
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
		fail(err)
	}
	for _, id := range ids {
		_, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 10})
		fail(err)
		_, err = rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
		fail(err)
		_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		fail(err)
	}
	_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	fail(err)
	_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	fail(err)
	return errs
}

// waitRuntimeReady waits, as the kubelet does before it syncs pods, until shimd
// answers and says that its runtime (containerd) is ready.
func waitRuntimeReady(t *testing.T, rs runtimeapi.RuntimeServiceClient) {
	t.Helper()
	waitReady(t, rs)
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := rs.Status(ctxT(t, 30*time.Second), &runtimeapi.StatusRequest{})
		require.NoError(t, err)
		if st.Status.Conditions[0].Status {
			return
		}
		require.True(t, time.Now().Before(deadline), "RuntimeReady did not come back: %v", st.Status.Conditions[0])
		time.Sleep(100 * time.Millisecond)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && v > 0 {
		return v
	}
	return def
}
