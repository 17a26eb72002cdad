package stats

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/stretchr/testify/require"
)

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
}

// A hybrid v1 host: the groups of /proc/<pid>/cgroup under each controller's mount
// (one bind-mounted from a sub-group), and the files the CRI stats take.
func TestDirectV1(t *testing.T) {
	root := t.TempDir()
	h := hostFS{cgroup2: filepath.Join(root, "unified"), v1: map[string]cgroupMount{
		"cpuacct": {point: filepath.Join(root, "cpu,cpuacct")},
		"memory":  {point: filepath.Join(root, "memory")},
		"pids":    {point: filepath.Join(root, "pids"), root: "/outer"},
	}}
	proc := []byte("12:pids:/outer/k/pod1/c1\n4:cpu,cpuacct:/k/pod1/c1\n3:memory:/k/pod1/c1\n1:name=systemd:/x\n0::/k/pod1/c1\n")
	d, err := h.taskDirs(proc)
	require.NoError(t, err)
	require.Equal(t, cgroupDirs{cpuacct: filepath.Join(root, "cpu,cpuacct/k/pod1/c1"), memory: filepath.Join(root, "memory/k/pod1/c1"),
		pids: filepath.Join(root, "pids/k/pod1/c1")}, d)
	require.Equal(t, filepath.Join(root, "unified/k/pod1/c1"), h.ownGroupOf(proc))

	writeFiles(t, d.cpuacct, map[string]string{"cpuacct.usage": "123456789\n"})
	writeFiles(t, d.memory, map[string]string{
		"memory.usage_in_bytes": "8388608\n", "memory.limit_in_bytes": "67108864\n",
		"memory.stat":                 "cache 1\nrss 2\ntotal_rss 4096\ntotal_inactive_file 1048576\ntotal_pgfault 77\ntotal_pgmajfault 3\n",
		"memory.memsw.usage_in_bytes": "9437184\n", "memory.memsw.limit_in_bytes": "134217728\n",
	})
	writeFiles(t, d.pids, map[string]string{"pids.current": "2\n"})
	data, _, err := readDirect(d)
	require.NoError(t, err)
	m := data.(*v1.Metrics)
	require.EqualValues(t, 123456789, m.CPU.Usage.Total)
	require.EqualValues(t, 8388608, m.Memory.Usage.Usage)
	require.EqualValues(t, 1048576, m.Memory.TotalInactiveFile)
	require.EqualValues(t, 4096, m.Memory.TotalRSS)
	require.EqualValues(t, 77, m.Memory.TotalPgFault)
	require.EqualValues(t, 3, m.Memory.TotalPgMajFault)
	require.EqualValues(t, 2, m.Pids.Current)
	smp, err := sampleOf(taskMetrics{data: data})
	require.NoError(t, err)
	require.EqualValues(t, 8388608-1048576, smp.memWS)
	require.EqualValues(t, 1048576, smp.swap.usage, "memsw less memory")
	require.EqualValues(t, 134217728-67108864, smp.swap.limit)

	// A group without a controller the stats need, or without its files: containerd.
	_, err = h.taskDirs([]byte("3:memory:/k/pod1/c1\n"))
	require.ErrorIs(t, err, errNoDirect)
	_, err = h.taskDirs([]byte("12:pids:/elsewhere/c1\n4:cpu,cpuacct:/k/c1\n3:memory:/k/c1\n"))
	require.ErrorIs(t, err, errNoDirect, "a pids group outside the bind-mounted one")
	require.NoError(t, os.Remove(filepath.Join(d.memory, "memory.stat")))
	_, _, err = readDirect(d)
	require.ErrorIs(t, err, errNoDirect)
}

// v2Group writes the files of a container's cgroup2 group: swap accounted, "max"
// limits, pressure.
func v2Group(t testing.TB) (hostFS, cgroupDirs, string) {
	root := t.TempDir()
	h := hostFS{cgroup2: root, unifiedOnly: true}
	d, err := h.taskDirs([]byte("0::/kubepods/pod1/c1\n"))
	require.NoError(t, err)
	dir := filepath.Join(root, "kubepods/pod1/c1")
	require.Equal(t, cgroupDirs{unified: dir}, d)
	psi := "some avg10=1.50 avg60=0.00 avg300=0.00 total=2000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n"
	writeFiles(t, dir, map[string]string{
		"cpu.stat": "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\n", "memory.current": "4194304\n", "memory.max": "max\n",
		"memory.stat":         "anon 1024\nfile 2048\ninactive_file 512\npgfault 9\npgmajfault 1\n",
		"memory.swap.current": "0\n", "memory.swap.max": "max\n", "pids.current": "3\n",
		"cpu.pressure": psi, "memory.pressure": psi, "io.pressure": psi,
	})
	return h, d, dir
}

// A v2 host: one group, swap accounted, "max" limits, pressure.
func TestDirectV2(t *testing.T) {
	h, d, dir := v2Group(t)
	root := h.cgroup2
	data, _, err := readDirect(d)
	require.NoError(t, err)
	m := data.(*v2.Metrics)
	require.EqualValues(t, 5000, m.CPU.UsageUsec)
	require.EqualValues(t, 4194304, m.Memory.Usage)
	require.EqualValues(t, 512, m.Memory.InactiveFile)
	require.EqualValues(t, 1024, m.Memory.Anon)
	require.EqualValues(t, uint64(math.MaxUint64), m.Memory.SwapLimit)
	require.EqualValues(t, uint64(math.MaxUint64), m.Memory.UsageLimit)
	require.EqualValues(t, 3, m.Pids.Current)
	require.EqualValues(t, 2000, m.CPU.PSI.Some.Total)
	require.NotNil(t, m.Io.PSI)
	smp, err := sampleOf(hostFacts(taskMetrics{data: data, group: dir}))
	require.NoError(t, err)
	require.EqualValues(t, 5000*1000, smp.cpuNanos)
	require.EqualValues(t, 4194304-512, smp.memWS)
	require.Zero(t, availableBytes(smp), "no memory limit")
	require.NotNil(t, smp.swap)
	require.False(t, smp.swap.limited, "swap.max is max")
	require.NotNil(t, smp.psi.io)

	_, err = hostFS{unifiedOnly: true, cgroup2: root}.taskDirs([]byte("1:memory:/x\n"))
	require.ErrorIs(t, err, errNoDirect)
}

// A container's sample leaves little garbage: the files are read into a pooled
// buffer and parsed in place. What is left is the metrics structs and the paths.
// (Read with os.ReadFile, maps and a bufio.Scanner, it was 102 allocations and
// 20.9 KB; now 36 and 3.2 KB, BenchmarkReadDirectV2.)
func TestDirectV2Allocations(t *testing.T) {
	_, d, _ := v2Group(t)
	_, _, err := readDirect(d) // the pool's first buffer
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(50, func() {
		if _, _, err := readDirect(d); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 40.0)
}

func BenchmarkReadDirectV2(b *testing.B) {
	_, d, _ := v2Group(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := readDirect(d); err != nil {
			b.Fatal(err)
		}
	}
}

// uint reads a file of one number (around it, the newline and spaces of kernel
// files), or "max"; anything else is an error that sends the list to containerd.
func TestUintFile(t *testing.T) {
	dir := t.TempDir()
	for in, want := range map[string]uint64{"0\n": 0, "7": 7, " 4194304\n": 4194304, "18446744073709551615\n": math.MaxUint64, "max\n": math.MaxUint64} {
		writeFiles(t, dir, map[string]string{"f": in})
		var r fileReader
		v := r.uint(dir, "f")
		r.release()
		require.NoError(t, r.err, "%q", in)
		require.Equal(t, want, v, "%q", in)
	}
	for _, bad := range []string{"", "-1", "+1", "1.5", "1 2", "18446744073709551616", "99999999999999999999"} {
		writeFiles(t, dir, map[string]string{"f": bad})
		var r fileReader
		r.uint(dir, "f")
		r.release()
		require.ErrorIs(t, r.err, errNoDirect, "%q", bad)
	}
}

// keyed takes each wanted key's number, leaves a missing key alone, and skips
// lines without a number.
func TestKeyed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"memory.events": "low 0\nhigh 3\nmax x\noom 2\noom_kill 5\n"})
	var r fileReader
	defer r.release()
	var high, maxv, kill, absent uint64 = 0, 9, 0, 42
	n := r.keyed(dir, "memory.events", keyDst{"oom_kill", &kill}, keyDst{"high", &high}, keyDst{"max", &maxv}, keyDst{"gone", &absent})
	require.NoError(t, r.err)
	require.Equal(t, 2, n)
	require.EqualValues(t, 5, kill)
	require.EqualValues(t, 3, high)
	require.EqualValues(t, 9, maxv, "not a number: kept")
	require.EqualValues(t, 42, absent)
	n = r.keyed(dir, "nothing-here", keyDst{"high", &high})
	require.Zero(t, n)
	require.ErrorIs(t, r.err, errNoDirect)
}
