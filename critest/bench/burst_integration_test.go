//go:build integration

package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkBurst starts, for each size in BENCH_BURST_PODS (default 100,200), that many
// one-container pods at once, as the kubelet's pod workers do when a node gets many
// pods, waits until all run, then tears them all down at once; BENCH_BURST_ROUNDS
// (default 1) rounds per size and runtime, after one warm-up burst of the first size,
// shimd and containerd's CRI alternating on the same containerd, each going first in
// every other round. Per pod: Run, the kubelet's PodSandboxStatus and ImageStatus,
// Create and Start, and Stop + Remove; per burst: the wall time until the last pod
// ran / was removed.
func BenchmarkBurst(b *testing.B) {
	tree := cpuTreeFromEnv(b) // before the daemons start, so that they count in it
	p := newPair(b)
	if tree != nil {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.cpu, tg.cgroupRoot = tree, tree.podRoot(tg.name)
		}
	}
	sizes, err := parseCounts(cmp.Or(os.Getenv("BENCH_BURST_PODS"), "100,200"))
	require.NoError(b, err, "BENCH_BURST_PODS")
	burstRounds := envInt("BENCH_BURST_ROUNDS", 1)
	for _, tg := range []*target{p.shimd, p.cd} {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	for i, n := range sizes {
		for _, tg := range []*target{p.shimd, p.cd} {
			tg.samples = map[string][]time.Duration{}
		}
		first := 0
		if i == 0 {
			first = -1 // a warm-up burst, not recorded
		}
		debug := os.Getenv("BENCH_SHIMD_DEBUG")
		probes := burstProbesFromEnv()
		for round := first; round < burstRounds; round++ {
			// The runtimes take turns going first, round after round.
			for _, tg := range turns([]*target{p.shimd, p.cd}, round+1) {
				timed := debug != "" && tg == p.shimd && round >= 0
				var before, started map[string]callTimes
				if timed {
					before = shimdCallTimes(b, debug)
				}
				probe := burstProbes{}
				if round >= 0 {
					probe = probes
				}
				startPhase, teardownPhase := fmt.Sprintf("start of %d pods, round %d", n, round+1), fmt.Sprintf("teardown of %d pods, round %d", n, round+1)
				cpu0 := tg.cpuNow(b)
				endProbe := probe.start(b, tg, startPhase, n)
				w0 := time.Now()
				ids := tg.burst(b, round, n)
				startWall := time.Since(w0)
				cpu1 := tg.cpuNow(b)
				startProbes := endProbe()
				if timed {
					started = shimdCallTimes(b, debug)
				}
				endProbe = probe.start(b, tg, teardownPhase, n)
				w1 := time.Now()
				tg.burstTeardown(b, round, ids)
				teardownWall := time.Since(w1)
				cpu2 := tg.cpuNow(b)
				teardownProbes := endProbe()
				if round >= 0 {
					// Each round's walls, so that rounds next to each other in time
					// can be compared pair by pair.
					fmt.Printf("%s, burst %s: wall %.2f s; %s: wall %.2f s\n", tg.name, startPhase, startWall.Seconds(), teardownPhase, teardownWall.Seconds())
					fmt.Print(cpu1.sub(cpu0).line(fmt.Sprintf("%s, burst %s", tg.name, startPhase), n, len(tg.daemons)) +
						cpu2.sub(cpu1).line(fmt.Sprintf("%s, burst %s", tg.name, teardownPhase), n, len(tg.daemons)) +
						startProbes + teardownProbes)
				}
				if timed {
					// Printed, not logged: the testing package keeps only the first
					// lines of a benchmark's log.
					fmt.Print(callTimesTable(fmt.Sprintf("shimd, burst start of %d pods, round %d", n, round+1), callTimesDiff(before, started), n) +
						callTimesTable(fmt.Sprintf("shimd, burst teardown of %d pods, round %d", n, round+1), callTimesDiff(started, shimdCallTimes(b, debug)), n))
				}
			}
		}
		report(b, fmt.Sprintf("burst: %d one-container pods started at once, then removed at once; %d rounds per runtime, alternating, each first in turn", n, burstRounds),
			[]string{"burst start (wall)", "pod start (per pod)", "sandbox status (per call)", "image status (per call)", "burst teardown (wall)", "pod teardown (per pod)"}, p.shimd, p.cd)
	}
}

// burst starts n pods concurrently and returns their sandbox ids.
func (tg *target) burst(b *testing.B, round, n int) []string {
	b.Helper()
	ids := make([]string, n)
	tg.concurrently(b, round, n, "burst start (wall)", "pod start (per pod)", func(i int) (err error) {
		ids[i], err = tg.startPod(fmt.Sprintf("burst-%s-%d-%d", tg.name, round+1, i), round >= 0)
		return err
	})
	return ids
}

// burstTeardown stops and removes the pods concurrently.
func (tg *target) burstTeardown(b *testing.B, round int, ids []string) {
	b.Helper()
	var retried atomic.Int32
	tg.concurrently(b, round, len(ids), "burst teardown (wall)", "pod teardown (per pod)", func(i int) error {
		err := tg.removePod(ids[i])
		for try := 1; err != nil && try <= stopRetries; try++ {
			retried.Add(1)
			b.Logf("%s: removal of pod %s failed, again as the kubelet would (%d of %d): %v", tg.name, ids[i], try, stopRetries, err)
			err = tg.removePod(ids[i])
		}
		return err
	})
	if n := retried.Load(); n > 0 {
		fmt.Printf("%s: a burst teardown of %d pods (round %d) needed %d retries\n", tg.name, len(ids), round+1, n)
	}
}

// stopRetries is how often a burst teardown tries a pod's removal again after an
// error, as the kubelet retries a failed StopPodSandbox: containerd's CRI plugin
// answers DeadlineExceeded ("failed to get task for container") for a few pods of
// a 200-pod teardown on 2 cores. Retries are logged and counted, never hidden.
const stopRetries = 2

// concurrently runs op(0..n-1) at once and, unless round is a warm-up, records the
// time of each op under perOp and of the whole under wallOp.
func (tg *target) concurrently(b *testing.B, round, n int, wallOp, perOp string, op func(int) error) {
	b.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			errs[i] = op(i)
			if round >= 0 && errs[i] == nil {
				tg.record(perOp, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if round >= 0 {
		tg.record(wallOp, time.Since(start))
	}
	for i, err := range errs {
		require.NoError(b, err, "%s %s, pod %d", tg.name, perOp, i)
	}
}

// startPod runs a pod with one busybox container as BenchmarkPodStart does, with
// the status calls the kubelet makes between: PodSandboxStatus after
// RunPodSandbox (for the pod's IP) and ImageStatus before CreateContainer (its
// image puller's check). With timed, their latencies are recorded as
// "sandbox status (per call)" and "image status (per call)".
func (tg *target) startPod(name string, timed bool) (string, error) {
	pod, cfg := podStartConfigs(name)
	if tg.cgroupRoot != "" {
		pod.Linux.CgroupParent = "/" + tg.cgroupRoot + "/pod" + pod.Metadata.Uid
	}
	if tg.logDir != "" {
		pod.LogDirectory = filepath.Join(tg.logDir, pod.Metadata.Uid)
		cfg.LogPath = filepath.Join(cfg.Metadata.Name, "0.log")
		// The kubelet makes the container's log directory before CreateContainer.
		if err := os.MkdirAll(filepath.Join(pod.LogDirectory, cfg.Metadata.Name), 0o755); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox: %w", err)
	}
	t0 := time.Now()
	if _, err := tg.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
		return resp.PodSandboxId, fmt.Errorf("PodSandboxStatus: %w", err)
	}
	t1 := time.Now()
	st, err := tg.is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: cfg.Image})
	if err != nil {
		return resp.PodSandboxId, fmt.Errorf("ImageStatus: %w", err)
	}
	if st.GetImage() == nil {
		return resp.PodSandboxId, fmt.Errorf("ImageStatus: %s is not there", cfg.Image.Image)
	}
	if timed {
		tg.record("sandbox status (per call)", t1.Sub(t0))
		tg.record("image status (per call)", time.Since(t1))
	}
	c, err := tg.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: pod})
	if err != nil {
		return resp.PodSandboxId, fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := tg.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return resp.PodSandboxId, fmt.Errorf("StartContainer: %w", err)
	}
	return resp.PodSandboxId, nil
}

// removePod stops and removes a pod (the kubelet stops the containers first; a stop of
// the pod does that too, with the same grace of zero for `sleep`).
func (tg *target) removePod(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if _, err := tg.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if _, err := tg.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	return nil
}

var recordMu sync.Mutex

// record adds a sample under op (safe for concurrent callers).
func (tg *target) record(op string, d time.Duration) {
	recordMu.Lock()
	defer recordMu.Unlock()
	tg.samples[op] = append(tg.samples[op], d)
}

// shimdCallTimes reads the latency of shimd's calls to containerd from its debug
// socket (BENCH_SHIMD_DEBUG).
func shimdCallTimes(b *testing.B, sock string) map[string]callTimes {
	b.Helper()
	resp, err := harness.UnixHTTPClient(sock, 10*time.Second).Get("http://shimd/debug/stats")
	require.NoError(b, err, "shimd's /debug/stats")
	defer resp.Body.Close()
	var st struct {
		Times map[string]callTimes `json:"containerd_call_times"`
	}
	require.NoError(b, json.NewDecoder(resp.Body).Decode(&st), "shimd's /debug/stats")
	require.NotEmpty(b, st.Times, "shimd's /debug/stats has no containerd_call_times")
	return st.Times
}
