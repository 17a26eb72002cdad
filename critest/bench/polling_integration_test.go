//go:build integration

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// The call kinds of the poller, in the order of the table.
const (
	pollList           = "ListPodSandbox+ListContainers"
	pollContainerStats = "ListContainerStats"
	pollSandboxStats   = "ListPodSandboxStats"
	pollSandboxStatus  = "PodSandboxStatus"
	pollCtrStatus      = "ContainerStatus"
)

var pollKinds = []string{pollList, pollContainerStats, pollSandboxStats, pollSandboxStatus, pollCtrStatus}

const (
	pollSettle     = 5 * time.Second  // after the last pod started, before the window
	pollStatusPods = 10               // pods whose status is asked each second
	pollStatsEvery = 10 * time.Second // the kubelet's stats housekeeping
)

// pollSizes is POLL_PODS, a comma-separated list of pod counts (default 110,250: the
// kubelet's default max-pods, and a dense node).
func pollSizes(b *testing.B) []int {
	v := os.Getenv("POLL_PODS")
	if v == "" {
		v = "110,250"
	}
	ns, err := parseCounts(v)
	require.NoError(b, err, "POLL_PODS")
	return ns
}

// pollCRIPeriods is POLL_CRI_PERIODS, the stats_collect_period of each containerd CRI
// side, comma-separated ("" or "default" for the plugin's default, 1 s). Default:
// ",10s", containerd's CRI at its default and with a 10 s collector, the kubelet's
// stats period: its 1 s collector is most of its polling cost.
func pollCRIPeriods() []string {
	v, ok := os.LookupEnv("POLL_CRI_PERIODS")
	if !ok {
		v = ",10s"
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "default" {
			p = ""
		}
		out = append(out, p)
	}
	return out
}

// pollWindow is POLL_WINDOW (default 60s).
func pollWindow(b *testing.B) time.Duration {
	v := os.Getenv("POLL_WINDOW")
	if v == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(v)
	require.NoError(b, err, "POLL_WINDOW=%q", v)
	return d
}

// pollResult is one side's numbers for one pod count.
type pollResult struct {
	daemonCPU, shimCPU float64 // ms of CPU per s of the window
	shims              int     // shims alive at both ends of the window
	rss, shimRSS       int64   // at the end of the window
	anon               int64   // the daemons' anonymous memory at the end
	// shimAnon is the shims' anonymous memory at the end: their own, which their RSS
	// holds besides the pages of the shim binary that every shim maps.
	shimAnon int64
	// own: shimd alone (zero for containerd's CRI): its CPU in the window (ms/s), its
	// RSS and anonymous memory at the end.
	ownCPU          float64
	ownRSS, ownAnon int64
	start, remove   time.Duration
	calls           int
	errs            []error
}

// polledPod is a pod of the poller and its one container.
type polledPod struct{ sandbox, container string }

// BenchmarkPolling measures a kubelet's steady-state load on a node of N running pods,
// for each N in POLL_PODS: shimd + its containerd against containerd with its CRI
// plugin, each on a containerd of its own, one side at a time (containerd's CRI first).
// Each side starts N one-container busybox pods, waits pollSettle, then for POLL_WINDOW
// is polled as the kubelet does (PLEG relist every second, stats every 10 s, the status
// of 10 pods every second), then removes the pods. CPU is read from /proc: the daemons'
// (usageOf) and that of the side's shims alive at both ends of the window.
func BenchmarkPolling(b *testing.B) {
	sides := newCostSides(b, pollCRIPeriods()...)
	for _, s := range sides {
		// containerd's CRI reads a pod's stats from its cgroup parent and fails
		// ListPodSandboxStats for a pod without one; the kubelet always gives one.
		s.cgroupRoot = fmt.Sprintf("shimd-bench-poll-%s-%d", s.name, os.Getpid())
		b.Cleanup(func() { harness.RemoveCgroupTree(s.cgroupRoot) })
		// Every container writes a CRI log, as under the kubelet: each runtime keeps
		// what copying a container's output takes (buffers, goroutines) for each.
		s.logDir = b.TempDir()
	}
	window := pollWindow(b)
	for i, n := range pollSizes(b) {
		res := map[*costSide]*pollResult{}
		// Each pod count starts with another side.
		for _, s := range turns(sides, i+1) {
			res[s] = s.poll(b, n, window)
		}
		reportPolling(b, n, window, sides[0], sides[1:], res)
		for _, s := range sides {
			require.Empty(b, res[s].errs, "%s, %d pods: calls that failed or answered short", s.name, n)
		}
	}
}

// poll starts n pods, polls them for window and removes them.
func (s *costSide) poll(b *testing.B, n int, window time.Duration) *pollResult {
	s.samples = map[string][]time.Duration{}
	r := &pollResult{}
	t0 := time.Now()
	ids := s.startPods(b, 0, n)
	r.start = time.Since(t0)
	pods := s.polledPods(b, ids)
	time.Sleep(pollSettle)

	before, shimsBefore, ownBefore := s.usage(b), shimUsage(b, s.address), s.ownUsage(b)
	t0 = time.Now()
	p := &poller{side: s, pods: pods}
	// POLL_PROFILE_DIR: CPU profiles of the side's daemons over the window (and with
	// BENCH_CONTENTION=1 their block and mutex profiles, with BENCH_TRACE=1 shimd's
	// execution trace), named <side>-polling-<n>-pods-<daemon>[.block|.mutex].pprof
	// and .trace.
	profiled := burstProbes{profileDir: os.Getenv("POLL_PROFILE_DIR"), profileFor: window,
		contention: os.Getenv("BENCH_CONTENTION") == "1", trace: os.Getenv("BENCH_TRACE") == "1"}.start(b, s.target, fmt.Sprintf("polling %d pods", n), n)
	// shimd's calls to containerd in the window, by method, with latencies.
	debug := os.Getenv("BENCH_SHIMD_DEBUG")
	var callsBefore map[string]callTimes
	if s.own != nil && debug != "" {
		callsBefore = shimdCallTimes(b, debug)
	}
	p.run(window)
	elapsed := time.Since(t0)
	if callsBefore != nil {
		// Printed, not logged (a benchmark's log keeps only its first lines).
		fmt.Print(callTimesTable(fmt.Sprintf("shimd, polling %d pods for %s (per pod: over the whole window)", n, window),
			callTimesDiff(callsBefore, shimdCallTimes(b, debug)), n))
	}
	profiled()
	after, shimsAfter, ownAfter := s.usage(b), shimUsage(b, s.address), s.ownUsage(b)
	if dir := os.Getenv("POLL_PROFILE_DIR"); dir != "" {
		snapshotMemory(b, s.target, s.pids(), dir, fmt.Sprintf("polling-%d-pods", n))
	}

	r.daemonCPU = ms(after.cpu-before.cpu) / elapsed.Seconds()
	r.rss, r.anon = after.rss, after.anon
	r.ownCPU = ms(ownAfter.cpu-ownBefore.cpu) / elapsed.Seconds()
	r.ownRSS, r.ownAnon = ownAfter.rss, ownAfter.anon
	var shimCPU time.Duration
	for pid, a := range shimsAfter {
		r.shimRSS += a.rss
		r.shimAnon += a.anon
		if bf, ok := shimsBefore[pid]; ok {
			shimCPU += a.cpu - bf.cpu
			r.shims++
		}
	}
	r.shimCPU = ms(shimCPU) / elapsed.Seconds()
	r.calls, r.errs = p.calls, p.errs

	t0 = time.Now()
	s.removePods(b, ids)
	r.remove = time.Since(t0)
	// The pods' cgroups go with their tasks, which may be just after RemovePodSandbox
	// answers; runc leaves the parents it made.
	var left []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = harness.RemoveCgroupTree(s.cgroupRoot); len(left) == 0 {
			break
		}
	}
	require.Empty(b, left, "%s: cgroups left after the pods were removed", s.name)
	return r
}

// polledPods pairs each sandbox with its container.
func (s *costSide) polledPods(b *testing.B, ids []string) []polledPod {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	require.NoError(b, err, s.name)
	byPod := map[string]string{}
	for _, c := range resp.Containers {
		byPod[c.PodSandboxId] = c.Id
	}
	pods := make([]polledPod, len(ids))
	for i, id := range ids {
		require.NotEmpty(b, byPod[id], "%s: pod %s has no container", s.name, id)
		pods[i] = polledPod{sandbox: id, container: byPod[id]}
	}
	return pods
}

// poller is a kubelet's steady-state load on one side: the PLEG relist, the stats
// provider and the pod workers' status calls, each in its own goroutine as in the
// kubelet. Every answer must cover all the pods.
type poller struct {
	side *costSide
	pods []polledPod

	mu    sync.Mutex
	calls int
	errs  []error
	next  int // the next pod whose status is asked
}

// run polls for window on a fixed schedule (a loop that falls behind catches up),
// then waits for the window's end.
func (p *poller) run(window time.Duration) {
	t0 := time.Now()
	end := t0.Add(window)
	var wg sync.WaitGroup
	for _, loop := range []struct {
		every time.Duration
		poll  func()
	}{{time.Second, p.relist}, {pollStatsEvery, p.stats}, {time.Second, p.statuses}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := t0; at.Before(end); at = at.Add(loop.every) {
				time.Sleep(time.Until(at))
				loop.poll()
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Until(end))
}

// call times one call of kind and records its error or a short answer.
func (p *poller) call(kind string, fn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	t0 := time.Now()
	err := fn(ctx)
	took := time.Since(t0)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", kind, err))
		return
	}
	p.side.record(kind, took)
}

// covers checks that an answer names each pod (or container) once.
func (p *poller) covers(what string, got []string, id func(polledPod) string) error {
	want := map[string]bool{}
	for _, pod := range p.pods {
		want[id(pod)] = true
	}
	for _, g := range got {
		if !want[g] {
			return fmt.Errorf("%d %s in the answer, %s unknown or twice", len(got), what, g)
		}
		delete(want, g)
	}
	if len(want) > 0 {
		return fmt.Errorf("%d of %d %s missing from the answer", len(want), len(p.pods), what)
	}
	return nil
}

func sandboxOf(p polledPod) string   { return p.sandbox }
func containerOf(p polledPod) string { return p.container }

// relist is the PLEG's: all sandboxes, then all containers.
func (p *poller) relist() {
	p.call(pollList, func(ctx context.Context) error {
		ps, err := p.side.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		cs, err := p.side.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		var pods, ctrs []string
		for _, s := range ps.Items {
			pods = append(pods, s.Id)
		}
		for _, c := range cs.Containers {
			ctrs = append(ctrs, c.Id)
		}
		return errors.Join(p.covers("pods", pods, sandboxOf), p.covers("containers", ctrs, containerOf))
	})
}

// stats is the stats provider's: all containers' stats, then all pods'. Each item
// must have CPU and memory numbers.
func (p *poller) stats() {
	p.call(pollContainerStats, func(ctx context.Context) error {
		resp, err := p.side.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		ids, full := []string{}, true
		for _, st := range resp.GetStats() {
			ids, full = append(ids, st.GetAttributes().GetId()), full && st.Cpu != nil && st.Memory != nil
		}
		return errors.Join(err, p.covers("containers", ids, containerOf), noStats(full))
	})
	p.call(pollSandboxStats, func(ctx context.Context) error {
		resp, err := p.side.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		var ids []string
		for _, st := range resp.GetStats() {
			ids = append(ids, st.GetAttributes().GetId())
			err = errors.Join(err, noStats(st.GetLinux().GetCpu() != nil && st.GetLinux().GetMemory() != nil))
		}
		return errors.Join(err, p.covers("pods", ids, sandboxOf))
	})
}

// noStats is the error of a stats item without CPU or memory numbers.
func noStats(full bool) error {
	if full {
		return nil
	}
	return errors.New("an item without CPU or memory stats")
}

// statuses asks the status of the next pollStatusPods pods and their containers.
func (p *poller) statuses() {
	for range min(pollStatusPods, len(p.pods)) {
		p.mu.Lock()
		pod := p.pods[p.next%len(p.pods)]
		p.next++
		p.mu.Unlock()
		p.call(pollSandboxStatus, func(ctx context.Context) error {
			resp, err := p.side.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.sandbox})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
				err = fmt.Errorf("pod %s is %v", pod.sandbox, resp.GetStatus().GetState())
			}
			return err
		})
		p.call(pollCtrStatus, func(ctx context.Context) error {
			resp, err := p.side.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: pod.container})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				err = fmt.Errorf("container %s is %v", pod.container, resp.GetStatus().GetState())
			}
			return err
		})
	}
}

// reportPolling prints one pod count's table, shimd beside each containerd CRI side
// with the ratio to it, and reports the main numbers as metrics.
func reportPolling(b *testing.B, n int, window time.Duration, sh *costSide, cds []*costSide, res map[*costSide]*pollResult) {
	rs := res[sh]
	fmt.Printf("\npolling %d pods for %s: ListPodSandbox+ListContainers every 1 s, ListContainerStats+ListPodSandboxStats every 10 s, PodSandboxStatus+ContainerStatus of %d pods every 1 s; CPU from /proc (shimd: sandbox.pause = %s; percentiles name their samples, \"max of N\" where too few)\n",
		n, window, min(pollStatusPods, n), pauseMode())
	out := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "%-44s\tshimd + containerd\t", "")
	for _, cd := range cds {
		fmt.Fprintf(out, "%s CRI (stats_collect_period %s)\tratio\t", strings.TrimSuffix(cd.name, "-"+collectPeriod(cd)), collectPeriod(cd))
	}
	fmt.Fprintln(out)
	row := func(name string, v func(*pollResult) float64) {
		fmt.Fprintf(out, "%-44s\t%.2f\t", name, v(rs))
		for _, cd := range cds {
			fmt.Fprintf(out, "%.2f\t%.2fx\t", v(res[cd]), v(rs)/v(res[cd]))
		}
		fmt.Fprintln(out)
	}
	row("daemon CPU (ms/s)", func(r *pollResult) float64 { return r.daemonCPU })
	row("shim CPU (ms/s)", func(r *pollResult) float64 { return r.shimCPU })
	row("daemons + shims CPU (ms/s)", func(r *pollResult) float64 { return r.daemonCPU + r.shimCPU })
	row("daemon RSS at the end (MiB)", func(r *pollResult) float64 { return mib(r.rss) })
	row("daemon anonymous memory at the end (MiB)", func(r *pollResult) float64 { return mib(r.anon) })
	row("shims' RSS at the end, all (MiB)", func(r *pollResult) float64 { return mib(r.shimRSS) })
	row("shims' anonymous memory at the end (MiB)", func(r *pollResult) float64 { return mib(r.shimAnon) })
	row("daemons + shims RSS (MiB)", func(r *pollResult) float64 { return mib(r.rss + r.shimRSS) })
	row("daemons + shims anonymous (MiB)", func(r *pollResult) float64 { return mib(r.anon + r.shimAnon) })
	for _, kind := range pollKinds {
		for _, p := range []float64{50, 99} {
			fmt.Fprintf(out, "%-44s\t%s\t", fmt.Sprintf("%s p%.0f", kind, p), pctCell(sh.samples[kind], p))
			for _, cd := range cds {
				fmt.Fprintf(out, "%s\t%.2fx\t", pctCell(cd.samples[kind], p), ms(percentile(sh.samples[kind], p))/ms(percentile(cd.samples[kind], p)))
			}
			fmt.Fprintln(out)
		}
	}
	row(fmt.Sprintf("start %d pods, 10 at a time (s)", n), func(r *pollResult) float64 { return r.start.Seconds() })
	row(fmt.Sprintf("remove %d pods, 10 at a time (s)", n), func(r *pollResult) float64 { return r.remove.Seconds() })
	fmt.Fprintf(out, "%-44s\t%d, %d\t", "calls in the window, errors", rs.calls, len(rs.errs))
	for _, cd := range cds {
		fmt.Fprintf(out, "%d, %d\t\t", res[cd].calls, len(res[cd].errs))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%-44s\t%d\t", "shims alive through the window", rs.shims)
	for _, cd := range cds {
		fmt.Fprintf(out, "%d\t\t", res[cd].shims)
	}
	fmt.Fprintln(out)
	require.NoError(b, out.Flush())
	fmt.Printf("shimd's side, split: shimd %.2f ms/s of CPU, RSS %.1f MiB (anon %.1f); its containerd %.2f ms/s, RSS %.1f MiB\n",
		rs.ownCPU, mib(rs.ownRSS), mib(rs.ownAnon), rs.daemonCPU-rs.ownCPU, mib(rs.rss-rs.ownRSS))

	b.ReportMetric(0, "ns/op")
	for _, cd := range cds {
		rc := res[cd]
		for _, m := range []struct {
			name string
			s, c float64
		}{
			{"daemon-cpu-ms/s", rs.daemonCPU, rc.daemonCPU},
			{"total-cpu-ms/s", rs.daemonCPU + rs.shimCPU, rc.daemonCPU + rc.shimCPU},
			{"list-p50-ms", ms(percentile(sh.samples[pollList], 50)), ms(percentile(cd.samples[pollList], 50))},
		} {
			b.ReportMetric(m.s, fmt.Sprintf("%s-%dpods-%s", sh.name, n, m.name))
			b.ReportMetric(m.c, fmt.Sprintf("%s-%dpods-%s", cd.name, n, m.name))
			b.ReportMetric(m.s/m.c, fmt.Sprintf("%dpods-%s-vs-%s-ratio", n, m.name, cd.name))
		}
	}
}

// collectPeriod is the stats_collect_period of a containerd CRI side, from its name.
func collectPeriod(cd *costSide) string {
	if _, p, ok := strings.Cut(cd.name, "-"); ok {
		return p
	}
	return "1s, the default"
}
