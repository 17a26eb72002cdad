//go:build integration

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
)

// cpuTree is BENCH_CPU_CGROUP=1: the benchmark's own CPU accounting, apart from
// whatever else the machine runs. The benchmark process moves itself into a cgroup v1
// cpuacct group of its own before it starts the daemons, so they, the shims, runc
// and the CNI plugins they start all count there; each side's pods get a cgroup
// parent below the same group, so runc's init and the pods' processes do too. A
// burst's cost is then the group's usage between two samples: the same work as the
// machine figure, without the other work of a shared machine (which /proc/stat
// counts). On a machine shared with other jobs, only this figure compares runs.
type cpuTree struct {
	root string // the group's name below the cpuacct mount ("shimd-bench-cpu-<pid>")
	dir  string // its directory
}

// cpuTreeFromEnv sets the group up when BENCH_CPU_CGROUP is set, or returns nil; the
// group and everything below it go again when the benchmark ends.
func cpuTreeFromEnv(b *testing.B) *cpuTree {
	b.Helper()
	if os.Getenv("BENCH_CPU_CGROUP") == "" {
		return nil
	}
	mnt := "/sys/fs/cgroup/cpuacct"
	if _, err := os.Stat(filepath.Join(mnt, "cpuacct.usage")); err != nil {
		b.Skipf("BENCH_CPU_CGROUP needs cgroup v1's cpuacct hierarchy at %s: %v", mnt, err)
	}
	t := &cpuTree{root: fmt.Sprintf("shimd-bench-cpu-%d", os.Getpid())}
	t.dir = filepath.Join(mnt, t.root)
	self := filepath.Join(t.dir, "bench")
	require.NoError(b, os.MkdirAll(self, 0o755), "BENCH_CPU_CGROUP")
	require.NoError(b, os.WriteFile(filepath.Join(self, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644), "BENCH_CPU_CGROUP: move the benchmark")
	b.Cleanup(func() {
		// Back to the root first: the group can go only when no process is in it.
		if err := os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			b.Logf("BENCH_CPU_CGROUP: move the benchmark back: %v", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for left := harness.RemoveCgroupTree(t.root); len(left) > 0; left = harness.RemoveCgroupTree(t.root) {
			if time.Now().After(deadline) {
				b.Errorf("BENCH_CPU_CGROUP: cgroups left: %s", strings.Join(left, ", "))
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	return t
}

// podRoot is the cgroup root (target.cgroupRoot) of side's pods, below the group.
func (t *cpuTree) podRoot(side string) string { return t.root + "/" + side }

// usage is the group's CPU time so far, and of it the kernel's (cpuacct.usage_sys);
// 0 without a group.
func (t *cpuTree) usage(b *testing.B) (all, sys time.Duration) {
	b.Helper()
	if t == nil {
		return 0, 0
	}
	read := func(name string) time.Duration {
		raw, err := os.ReadFile(filepath.Join(t.dir, name))
		require.NoError(b, err, "BENCH_CPU_CGROUP")
		ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		require.NoError(b, err, "BENCH_CPU_CGROUP: %s", name)
		return time.Duration(ns)
	}
	return read("cpuacct.usage"), read("cpuacct.usage_sys")
}
