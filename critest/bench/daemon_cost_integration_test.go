//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// daemonUsage is the CPU time and resident memory of a set of daemon processes.
type daemonUsage struct {
	cpu time.Duration
	rss int64 // bytes
	// anon is the part of rss that is the processes' own memory (heap, stacks); the
	// rest is mostly the mapped binaries, clean pages the kernel can take back.
	anon int64
}

// usageOf reads utime + stime and VmRSS of each pid from /proc and sums them. Child
// processes (shims, runc, CNI plugins) are not counted: they are the floor's.
func usageOf(pids ...int) (daemonUsage, error) {
	var u daemonUsage
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return u, err
		}
		// Fields after the command name, which is in parentheses and may hold spaces.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		u.cpu += time.Duration(utime+stime) * time.Second / clockTicks
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return u, err
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				u.rss += kiB(v)
			}
			if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
				u.anon += kiB(v)
			}
		}
	}
	return u, nil
}

// shimUsage is the CPU and RSS of each shim of the containerd at address.
func shimUsage(b *testing.B, address string) map[int]daemonUsage {
	pids, err := harness.ShimPIDs(address)
	require.NoError(b, err)
	out := map[int]daemonUsage{}
	for _, pid := range pids {
		if u, err := usageOf(pid); err == nil { // else gone since
			out[pid] = u
		}
	}
	return out
}

// kiB parses a /proc/PID/status size ("  1234 kB") into bytes.
func kiB(v string) int64 {
	kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return kb << 10
}

// costSide is one runtime in BenchmarkDaemonCost: its CRI client and the daemons whose
// cost is measured.
type costSide struct {
	*target
	pids func() []int
	rows map[string]string
	// own is the runtime's own daemon (shimd), whose RSS is also shown alone; 0: none.
	own func() int
	// address is the containerd socket of the side, whose shims serve its pods.
	address string
	// root is the side's containerd root: its content store and snapshots.
	root string
}

// newCostSides starts the sides of BenchmarkDaemonCost and BenchmarkPolling, each on
// a containerd and CNI network of its own, and pulls the benchmark busybox into all:
// shimd + a containerd with its CRI plugin off, then a containerd with its CRI plugin
// for each of criPeriods (its stats_collect_period; "" for the default, 1 s), named
// "containerd" for the default and "containerd-<period>" otherwise. The harness checks
// all for leaks at the end.
func newCostSides(b *testing.B, criPeriods ...string) []*costSide {
	if os.Geteuid() != 0 {
		b.Skip("the benchmark needs root")
	}
	if len(criPeriods) == 0 {
		criPeriods = []string{""}
	}
	hosts := registryHosts(b)
	var cris []criSide
	for _, period := range criPeriods {
		name := "containerd"
		if period != "" {
			name += "-" + period
		}
		cris = append(cris, criSide{name: name, opts: harness.ContainerdOptions{CRIStatsCollectPeriod: period}})
	}
	return newCostSidesWith(b, hosts, shimdExtraConfig(hosts), cris...)
}

// criSide is a containerd CRI side of newCostSidesWith: its name and its containerd's
// options (the CRI plugin, registry hosts and log level are set for it).
type criSide struct {
	name string
	opts harness.ContainerdOptions
}

// newCostSidesWith is newCostSides with the registry hosts directory, shimd's config
// and the containerd CRI sides given.
func newCostSidesWith(b *testing.B, hosts, shimdConfig string, cris ...criSide) []*costSide {
	if os.Geteuid() != 0 {
		b.Skip("the benchmark needs root")
	}
	contentionFromEnv(b)
	shEnv := harness.New(b, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: shimdConfig,
		RuncRoot:    filepath.Join(b.TempDir(), "runc"),
		Pause:       pauseMode(),
		LogLevel:    benchLogLevel,
	}, Containerd: harness.ContainerdOptions{LogLevel: benchLogLevel}})

	sides := []*costSide{
		{target: &target{name: "shimd", rt: shEnv.Shimd.Runtime(b), is: shEnv.Shimd.Images(b), samples: map[string][]time.Duration{}},
			pids:    func() []int { return []int{shEnv.Shimd.PID(), shEnv.Containerd.PID()} },
			own:     func() int { return shEnv.Shimd.PID() },
			address: shEnv.Containerd.Address(), root: shEnv.Containerd.Root()},
	}
	// Each side's daemons with a debug socket, for the polling profiles
	// (POLL_PROFILE_DIR).
	sides[0].debugSocks = shimdSideSocks(shEnv.Containerd.DebugAddress())
	for _, c := range cris {
		cdEnv, criRT, cdIS := startCRIWith(b, hosts, c.opts)
		sides = append(sides, &costSide{target: &target{name: c.name, rt: criRT, is: cdIS, samples: map[string][]time.Duration{},
			debugSocks: []debugSock{{"containerd", cdEnv.Containerd.DebugAddress()}}},
			pids:    func() []int { return []int{cdEnv.Containerd.PID()} },
			address: cdEnv.Containerd.Address(), root: cdEnv.Containerd.Root()})
	}
	for _, s := range sides {
		s.rows = map[string]string{}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := s.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, s.name)
	}
	return sides
}

// ownRSS is " (shimd N MiB)" for a side with a daemon of its own.
func (s *costSide) ownRSS(b *testing.B) string {
	if s.own == nil {
		return ""
	}
	u := s.ownUsage(b)
	return fmt.Sprintf(" (shimd %.1f, anon %.1f)", mib(u.rss), mib(u.anon))
}

// ownUsage is the usage of the side's own daemon (shimd); zero for a side without one.
func (s *costSide) ownUsage(b *testing.B) daemonUsage {
	if s.own == nil {
		return daemonUsage{}
	}
	u, err := usageOf(s.own())
	require.NoError(b, err)
	return u
}

// ownCPU is " (shimd N ms)": the part of a phase's CPU per pod that was shimd's own.
func (s *costSide) ownCPU(before, after daemonUsage, n int) string {
	if s.own == nil {
		return ""
	}
	return fmt.Sprintf(" (shimd %.1f)", ms(after.cpu-before.cpu)/float64(n))
}

// BenchmarkDaemonCost measures what the daemons themselves cost, apart from the child
// processes every runtime pays the same: shimd + a containerd with its CRI plugin off,
// against a containerd with its CRI plugin, each on its own containerd and CNI network.
// Phases: idle (10 s), starting 30 pods (CPU per pod), 30 pods idle, starting 70 more
// (100), 100 pods idle (10 s), removing all 100 (CPU per pod), then idle again. Each
// phase runs on one side and then the other, never both at once.
func BenchmarkDaemonCost(b *testing.B) {
	sides := newCostSides(b)
	ids := map[*costSide][]string{}
	idle := func(row string, d time.Duration) {
		for _, s := range sides {
			before := s.usage(b)
			time.Sleep(d)
			after := s.usage(b)
			s.rows[row] = fmt.Sprintf("%5.2f%% CPU %6.1f MiB%s", 100*float64(after.cpu-before.cpu)/float64(d), mib(after.rss), s.ownRSS(b))
		}
	}
	start := func(row string, n int) {
		for _, s := range sides {
			before, ownBefore := s.usage(b), s.ownUsage(b)
			t0 := time.Now()
			ids[s] = append(ids[s], s.startPods(b, len(ids[s]), n)...)
			wall := time.Since(t0)
			after, ownAfter := s.usage(b), s.ownUsage(b)
			s.rows[row] = fmt.Sprintf("%5.1f ms CPU/pod%s %6.1f MiB%s, wall %.1fs", ms(after.cpu-before.cpu)/float64(n), s.ownCPU(ownBefore, ownAfter, n), mib(after.rss), s.ownRSS(b), wall.Seconds())
		}
	}
	time.Sleep(2 * time.Second)
	idle("idle, no pods (10 s)", 10*time.Second)
	start("start 30 pods", 30)
	idle("30 pods idle (10 s)", 10*time.Second)
	start("start 70 more (100)", 70)
	idle("100 pods idle (10 s)", 10*time.Second)
	for _, s := range sides {
		before, ownBefore := s.usage(b), s.ownUsage(b)
		t0 := time.Now()
		s.removePods(b, ids[s])
		wall := time.Since(t0)
		after, ownAfter := s.usage(b), s.ownUsage(b)
		s.rows["remove 100 pods"] = fmt.Sprintf("%5.1f ms CPU/pod%s %6.1f MiB%s, wall %.1fs", ms(after.cpu-before.cpu)/float64(len(ids[s])), s.ownCPU(ownBefore, ownAfter, len(ids[s])), mib(after.rss), s.ownRSS(b), wall.Seconds())
	}
	time.Sleep(5 * time.Second)
	idle("after removal (10 s)", 10*time.Second)

	var out strings.Builder
	fmt.Fprintf(&out, "\ndaemon cost: shimd + containerd (CRI off) vs containerd with its CRI plugin; CPU of the daemons only, RSS at the end of the phase; pods started 10 at a time (shimd: sandbox.pause = %s)\n", pauseMode())
	fmt.Fprintf(&out, "%-24s %-84s %s\n", "phase", "shimd + containerd (CPU and RSS MiB: both, and shimd alone)", "containerd CRI")
	for _, row := range []string{"idle, no pods (10 s)", "start 30 pods", "30 pods idle (10 s)", "start 70 more (100)", "100 pods idle (10 s)", "remove 100 pods", "after removal (10 s)"} {
		fmt.Fprintf(&out, "%-24s %-84s %s\n", row, sides[0].rows[row], sides[1].rows[row])
	}
	shimdOnly, err := usageOf(sides[0].own())
	require.NoError(b, err)
	fmt.Fprintf(&out, "shimd alone at the end: %.1f MiB RSS (%.1f MiB of it anonymous, the rest mostly its mapped binary), %.2f s CPU in all\n", mib(shimdOnly.rss), mib(shimdOnly.anon), shimdOnly.cpu.Seconds())
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(mib(shimdOnly.rss), "shimd-rss-end-MiB")
	fmt.Fprint(os.Stdout, out.String())
}

func (s *costSide) usage(b *testing.B) daemonUsage {
	b.Helper()
	u, err := usageOf(s.pids()...)
	require.NoError(b, err, s.name)
	return u
}

// startPods starts n one-container pods, 10 at a time (the kubelet's default QPS keeps
// it near that).
func (s *costSide) startPods(b *testing.B, first, n int) []string {
	b.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ids[i], errs[i] = s.startPod(fmt.Sprintf("cost-%s-%d", s.name, first+i), false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(b, err, "%s pod %d", s.name, first+i)
	}
	return ids
}

func (s *costSide) removePods(b *testing.B, ids []string) {
	b.Helper()
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = s.removePod(id)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(b, err, "%s removal of pod %d", s.name, i)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
