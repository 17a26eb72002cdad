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
}

// cpuNow samples the machine and tg's daemons.
func (tg *target) cpuNow(b *testing.B) cpuSample {
	b.Helper()
	m, err := machineBusy()
	require.NoError(b, err, "read /proc/stat")
	f, err := usageOf(tg.daemons[0])
	require.NoError(b, err, "read the first daemon's CPU time")
	rest, err := usageOf(tg.daemons[1:]...)
	require.NoError(b, err, "read the daemons' CPU time")
	return cpuSample{machine: m, daemons: f.cpu + rest.cpu, first: f.cpu, tree: tg.cpu.usage(b)}
}

func (s cpuSample) sub(o cpuSample) cpuSample {
	return cpuSample{machine: s.machine - o.machine, daemons: s.daemons - o.daemons, first: s.first - o.first, tree: s.tree - o.tree}
}

// line prints the sample as the cost of what, for n pods; several daemons: the
// first's part too.
func (s cpuSample) line(what string, n, daemons int) string {
	part := ""
	if daemons > 1 {
		part = fmt.Sprintf(" (the first, shimd, %.1f s)", s.first.Seconds())
	}
	tree := ""
	if s.tree > 0 {
		tree = fmt.Sprintf("; of the benchmark's own processes and pods %.1f s (%.0f ms per pod), of it not the daemons %.0f ms per pod",
			s.tree.Seconds(), float64(s.tree.Milliseconds())/float64(n), float64((s.tree-s.daemons).Milliseconds())/float64(n))
	}
	return fmt.Sprintf("%s: CPU time of the whole machine %.1f s (%.0f ms per pod), of the daemons %.1f s%s (%.0f ms per pod), of the rest %.1f s%s\n",
		what, s.machine.Seconds(), float64(s.machine.Milliseconds())/float64(n),
		s.daemons.Seconds(), part, float64(s.daemons.Milliseconds())/float64(n), (s.machine - s.daemons).Seconds(), tree)
}
