//go:build integration

package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cpuSample is the CPU time the whole machine and a target's daemons had used at one
// moment. A burst's cost is the difference of two samples: the machine's figure
// holds everything the burst made run (runc, shims, CNI plugins, pause and the
// containers' first instants as well as the daemons), so it is the work a node pays
// for, whichever process did it.
type cpuSample struct {
	machine time.Duration // busy time of all CPUs: /proc/stat's first line less idle and iowait
	daemons time.Duration // utime + stime of the target's daemons, themselves only
	first   time.Duration // of the first daemon alone (shimd, for shimd)
	tree    time.Duration // the benchmark's own process tree and pods (cpuTree); 0 without
	// treeSys is the tree's kernel time (cpuacct.usage_sys); snap the machine's CPU by
	// kind. The kernel's share of the same work can move with the machine's history
	// while user time does not (docs/benchmarks.md, "The journal-less root
	// filesystem"), so the line splits them.
	treeSys time.Duration
	snap    machineSnap
}

// cpuNow samples the machine and tg's daemons.
func (tg *target) cpuNow(b *testing.B) cpuSample {
	b.Helper()
	snap, err := readMachine()
	require.NoError(b, err, "read /proc/stat")
	f, err := usageOf(tg.daemons[0])
	require.NoError(b, err, "read the first daemon's CPU time")
	rest, err := usageOf(tg.daemons[1:]...)
	require.NoError(b, err, "read the daemons' CPU time")
	tree, treeSys := tg.cpu.usage(b)
	return cpuSample{machine: snap.busy(), daemons: f.cpu + rest.cpu, first: f.cpu,
		tree: tree, treeSys: treeSys, snap: snap}
}

func (s cpuSample) sub(o cpuSample) cpuSample {
	return cpuSample{machine: s.machine - o.machine, daemons: s.daemons - o.daemons, first: s.first - o.first,
		tree: s.tree - o.tree, treeSys: s.treeSys - o.treeSys, snap: s.snap.since(o.snap)}
}

// line prints the sample as the cost of what, for n pods; several daemons: the
// first's part too.
func (s cpuSample) line(what string, n, daemons int) string {
	part := ""
	if daemons > 1 {
		part = fmt.Sprintf(" (the first, shimd, %.1f s)", s.first.Seconds())
	}
	perPod := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(n) }
	tree := ""
	if s.tree > 0 {
		tree = fmt.Sprintf("; of the benchmark's own processes and pods %.1f s (%.0f ms per pod: user %.0f, system %.0f), of it not the daemons %.0f ms per pod",
			s.tree.Seconds(), perPod(s.tree), perPod(s.tree-s.treeSys), perPod(s.treeSys), perPod(s.tree-s.daemons))
	}
	return fmt.Sprintf("%s: CPU time of the whole machine %.1f s (%.0f ms per pod: user %.0f, system %.0f), of the daemons %.1f s%s (%.0f ms per pod), of the rest %.1f s%s\n",
		what, s.machine.Seconds(), perPod(s.machine), perPod(s.snap.user), perPod(s.snap.system),
		s.daemons.Seconds(), part, perPod(s.daemons), (s.machine - s.daemons).Seconds(), tree)
}
