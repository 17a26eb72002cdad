//go:build integration

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
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

	var made []*soakRound
	logDir := t.TempDir() // the pods' logs, which the kubelet would remove
	span := 4 * time.Second
	for round := 0; round < rounds; round++ {
		r := &soakRound{}
		made = append(made, r)
		done := make(chan []error, 1)
		go func(round int) { done <- r.lifecycle(rs, round, logDir) }(round)
		// The crash falls anywhere in the lifecycle, or just after it: span follows
		// how long the last lifecycle that a crash did not cut took (about 3.5 s on
		// an idle machine: the two stops wait out their 1 s timeout).
		time.Sleep(time.Duration(rng.Int63n(int64(span))))
		victim := "shimd"
		if rng.Intn(10) >= 7 {
			victim = "containerd"
		}
		step := r.step()
		kills[victim+" during "+step]++
		if victim == "shimd" {
			env.Shimd.Kill9()
			env.Shimd.Start(t)
		} else {
			env.Containerd.Kill()
			env.Containerd.Restart(t)
		}
		select {
		case errs := <-done:
			for _, err := range errs {
				results[status.Code(err)]++
				require.NotEqual(t, codes.Internal, status.Code(err), "round %d: %v", round, err)
			}
			if step == "done" && len(errs) == 0 {
				span = max(r.took()*11/10, 100*time.Millisecond)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("round %d: the lifecycle hangs", round)
		}
		waitRuntimeReady(t, rs)
	}
	t.Logf("kills: %v; answers by code: %v", kills, results)

	// Lost: a pod or container that shimd said it made, that no one asked to remove,
	// and that shimd no longer lists (the kubelet would never clean it up or see it).
	lostPods, lostContainers := lost(t, rs, made)

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
	leaks := harness.FindLeaks(ctxT(t, time.Minute), env.LeakCheck())
	t.Logf("crash-soak: %d rounds (%d pods made), %d kills of shimd, %d of containerd; lost pods %d, lost containers %d; leaked: %s",
		rounds, countMade(made), sumKills(kills, "shimd"), sumKills(kills, "containerd"), lostPods, lostContainers,
		harness.FormatLeakCounts(harness.LeakCounts(leaks)))
	require.Zero(t, lostPods+lostContainers, "lost pods and containers")
}

// soakRound is one lifecycle of the soak: the step it is at (for the kill's log) and
// what it made and asked to remove (to find what shimd lost).
type soakRound struct {
	mu               sync.Mutex
	began, ended     time.Time
	at               string
	pod              string
	podRemoveAsked   bool
	containers       []string
	containerRemoved map[string]bool // remove asked
}

func (r *soakRound) enter(step string) {
	r.mu.Lock()
	r.at = step
	r.mu.Unlock()
}

// took is how long the lifecycle ran (0 if it has not ended).
func (r *soakRound) took() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended.IsZero() {
		return 0
	}
	return r.ended.Sub(r.began)
}

func (r *soakRound) step() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == "" {
		return "RunPodSandbox"
	}
	return r.at
}

// lost lists pods and containers and counts those made, never asked to be removed,
// and missing.
func lost(t *testing.T, rs runtimeapi.RuntimeServiceClient, made []*soakRound) (pods, containers int) {
	listedPods := map[string]bool{}
	for _, p := range listPods(t, rs, nil) {
		listedPods[p.Id] = true
	}
	cs, err := rs.ListContainers(ctxT(t, time.Minute), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	listedContainers := map[string]bool{}
	for _, c := range cs.Containers {
		listedContainers[c.Id] = true
	}
	for i, r := range made {
		if r.pod != "" && !r.podRemoveAsked && !listedPods[r.pod] {
			t.Errorf("round %d: pod %s was made, never removed, and is not listed", i, r.pod)
			pods++
		}
		for _, id := range r.containers {
			if !r.containerRemoved[id] && !r.podRemoveAsked && !listedContainers[id] {
				t.Errorf("round %d: container %s was made, never removed, and is not listed", i, id)
				containers++
			}
		}
	}
	return pods, containers
}

func countMade(made []*soakRound) int {
	n := 0
	for _, r := range made {
		if r.pod != "" {
			n++
		}
	}
	return n
}

// sumKills adds the kills of one daemon over the steps they fell in.
func sumKills(kills map[string]int, daemon string) int {
	n := 0
	for k, v := range kills {
		if strings.HasPrefix(k, daemon+" ") {
			n += v
		}
	}
	return n
}

// lifecycle runs one pod's life through the CRI and returns the errors it met (a
// crash cuts it short wherever it is; later steps then fail or are skipped). It notes
// each step it enters, and what it made and asked to remove.
func (r *soakRound) lifecycle(rs runtimeapi.RuntimeServiceClient, round int, logDir string) []error {
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
	cfg.LogDirectory = logDir
	r.mu.Lock()
	r.began = time.Now()
	r.mu.Unlock()
	r.enter("RunPodSandbox")
	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if fail(err) {
		return errs
	}
	r.mu.Lock()
	r.pod, r.containerRemoved = pod.PodSandboxId, map[string]bool{}
	r.mu.Unlock()
	var ids []string
	for _, name := range []string{"a", "b"} {
		r.enter("CreateContainer")
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
		r.mu.Lock()
		r.containers = append(r.containers, c.ContainerId)
		r.mu.Unlock()
		r.enter("StartContainer")
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
		fail(err)
	}
	for _, id := range ids {
		r.enter("ExecSync")
		_, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 10})
		fail(err)
		r.enter("StopContainer")
		_, err = rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
		fail(err)
		r.enter("RemoveContainer")
		r.mu.Lock()
		r.containerRemoved[id] = true
		r.mu.Unlock()
		_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		fail(err)
	}
	r.enter("StopPodSandbox")
	_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	fail(err)
	r.enter("RemovePodSandbox")
	r.mu.Lock()
	r.podRemoveAsked = true
	r.mu.Unlock()
	_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	fail(err)
	r.mu.Lock()
	r.at, r.ended = "done", time.Now()
	r.mu.Unlock()
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
