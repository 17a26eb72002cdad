package stats

import (
	"os"
	"path/filepath"
	"testing"

	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

func TestParsePSI(t *testing.T) {
	got, err := parsePSI([]byte("some avg10=1.50 avg60=0.25 avg300=0.00 total=100014\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=90282\n"))
	require.NoError(t, err)
	require.Equal(t, &v2.PSIStats{Some: &v2.PSIData{Avg10: 1.5, Avg60: 0.25, Total: 100014}, Full: &v2.PSIData{Total: 90282}}, got)
	got, err = parsePSI([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"))
	require.NoError(t, err)
	require.Nil(t, got.Full, "the root's cpu.pressure before Linux 5.13 has no full line")
	for _, bad := range []string{"", "half avg10=0", "some avg10", "some total=x"} {
		_, err := parsePSI([]byte(bad))
		require.Error(t, err, bad)
	}
}

// ownGroup takes a task's cgroup2 group only when it is its own; podGroup only a
// parent that is the pod's cgroup parent; readPSI leaves nil what is missing.
func TestCgroupGroups(t *testing.T) {
	root := t.TempDir()
	h := hostFS{proc: filepath.Join(root, "proc"), sys: filepath.Join(root, "sys"), cgroup2: filepath.Join(root, "unified")}
	writeFile(t, filepath.Join(h.proc, "10", "cgroup"),
		"9:name=systemd:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n")
	writeFile(t, filepath.Join(h.proc, "11", "cgroup"), "4:memory:/kubepods/pod1/c2\n0::/\n")
	writeFile(t, filepath.Join(h.proc, "12", "cgroup"), "4:memory:/kubepods/pod1/c3\n0::/system/containerd\n")
	writeFile(t, filepath.Join(h.proc, "13", "cgroup"), "0::/kubepods.slice/kubepods-pod2.slice/shimd-c4.scope\n")

	require.Equal(t, filepath.Join(h.cgroup2, "kubepods/pod1/c1"), h.ownGroup(10), "hybrid: joined the unified hierarchy")
	require.Empty(t, h.ownGroup(11), "hybrid: still in the root group")
	require.Empty(t, h.ownGroup(12), "hybrid: in the group it inherited")
	require.Equal(t, filepath.Join(h.cgroup2, "kubepods.slice/kubepods-pod2.slice/shimd-c4.scope"), h.ownGroup(13), "v2")
	require.Empty(t, h.ownGroup(14), "gone")
	require.Empty(t, h.ownGroup(0))
	require.Empty(t, hostFS{proc: h.proc}.ownGroup(10), "no cgroup2 mount")

	c1 := h.ownGroup(10)
	require.Equal(t, filepath.Join(h.cgroup2, "kubepods/pod1"), podGroup(c1, "/kubepods/pod1"))
	require.Equal(t, filepath.Join(h.cgroup2, "kubepods/pod1"), podGroup(c1, "/kubepods/pod1/"))
	require.Empty(t, podGroup(c1, ""), "no cgroup parent: the parent is shared")
	require.Empty(t, podGroup(c1, "/other"))
	require.Equal(t, filepath.Join(h.cgroup2, "kubepods.slice/kubepods-pod2.slice"), podGroup(h.ownGroup(13), "kubepods-pod2.slice"))

	writeFile(t, filepath.Join(c1, "cpu.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n")
	writeFile(t, filepath.Join(c1, "io.pressure"), "garbage\n")
	got := readPSI(c1)
	require.Equal(t, uint64(5), got.cpu.GetSome().GetTotal())
	require.Nil(t, got.memory, "no memory.pressure")
	require.Nil(t, got.io, "unparsable")
	require.Equal(t, psiSet{}, readPSI(""))
	require.False(t, hasFile(c1, "memory.swap.current"))
	require.True(t, hasFile(c1, "cpu.pressure"))

	writeFile(t, filepath.Join(h.sys, "dev", "block", "254:0", "uevent"), "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n")
	require.Equal(t, "/dev/vda", h.blockDevice(254, 0))
	require.Equal(t, "8:16", h.blockDevice(8, 16))
	require.Equal(t, "254:0", hostFS{}.blockDevice(254, 0))
}

// A pod's OOM kills are read from its group's memory.events, found as the parent of
// a task's own group when that parent is the pod's cgroup parent.
func TestOOMKillsIn(t *testing.T) {
	pod := filepath.Join(t.TempDir(), "kubepods.slice", "kubepods-burstable-podx.slice")
	require.NoError(t, os.MkdirAll(filepath.Join(pod, "cri-shimd-c.scope"), 0o755))
	_, ok := OOMKillsIn(pod)
	require.False(t, ok, "no memory.events")
	require.NoError(t, os.WriteFile(filepath.Join(pod, "memory.events"),
		[]byte("low 0\nhigh 0\nmax 12\noom 3\noom_kill 5\noom_group_kill 1\n"), 0o644))
	n, ok := OOMKillsIn(podGroup(filepath.Join(pod, "cri-shimd-c.scope"), "kubepods-burstable-podx.slice"))
	require.True(t, ok)
	require.Equal(t, uint64(5), n)
}
