package stats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// A pod's cgroup is its cgroup parent: a path with cgroupfs, a slice expanded as
// runc's systemd driver expands it.
func TestPodRel(t *testing.T) {
	tests := []struct {
		name, parent, driver, want string
	}{
		{"cgroupfs", "/kubepods/besteffort/pod1", "cgroupfs", "/kubepods/besteffort/pod1"},
		{"cgroupfs, relative and untidy", "kubepods//pod1/", "cgroupfs", "/kubepods/pod1"},
		{"no parent", "", "cgroupfs", ""},
		{"systemd slice", "kubepods-besteffort-pod1_2.slice", "systemd",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice"},
		{"systemd, a path to the slice: its base", "/kubepods.slice/kubepods-pod1.slice", "systemd", "/kubepods.slice/kubepods-pod1.slice"},
		{"systemd root slice", "-.slice", "systemd", "/"},
		{"systemd, not a slice", "/kubepods/pod1", "systemd", ""},
		{"systemd, empty component", "kubepods--pod1.slice", "systemd", ""},
		{"systemd, bare suffix", ".slice", "systemd", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, podRel(tt.parent, tt.driver))
		})
	}
	_, ok := hostFS{cgroup2: "/sys/fs/cgroup", unifiedOnly: true}.podDirs("/")
	require.False(t, ok, "the root is no pod's")
}

// The pod's figures are its cgroup's, in each v1 hierarchy: CPU time and page cache
// of a container that has exited stay in the pod's, which never goes down; the
// pod's pressure is its cgroup2 group's on a hybrid host.
func TestPodCgroupV1(t *testing.T) {
	root := t.TempDir()
	h := hostFS{cgroup2: filepath.Join(root, "unified"), v1: map[string]cgroupMount{
		"cpuacct": {point: filepath.Join(root, "cpuacct")},
		"memory":  {point: filepath.Join(root, "memory")},
		"pids":    {point: filepath.Join(root, "pids")},
	}}
	s := &Collector{host: h, opts: Options{CgroupDriver: "cgroupfs"}}
	sb := pod.Pod{ID: "p1", Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod1"}}}

	_, err := s.podCgroupSample(sb)
	require.ErrorIs(t, err, errNoDirect, "no pod cgroup made yet")

	pod1 := func(ctrl string) string { return filepath.Join(root, ctrl, "kubepods/pod1") }
	write := func(cpu, usage, inactive string) {
		writeFiles(t, pod1("cpuacct"), map[string]string{"cpuacct.usage": cpu})
		writeFiles(t, pod1("memory"), map[string]string{"memory.usage_in_bytes": usage, "memory.limit_in_bytes": "9223372036854771712",
			"memory.stat": "cache 5\ntotal_rss 4096\ntotal_inactive_file " + inactive + "\ntotal_pgfault 1\ntotal_pgmajfault 0\n"})
		writeFiles(t, pod1("pids"), map[string]string{"pids.current": "3"})
	}
	write("5000000000", "104857600", "1048576") // a container runs
	writeFiles(t, pod1("unified"), map[string]string{"cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"})
	before, err := s.podCgroupSample(sb)
	require.NoError(t, err)
	require.EqualValues(t, 5e9, before.cpuNanos)
	require.EqualValues(t, 104857600-1048576, before.memWS)
	require.EqualValues(t, 7, before.psi.cpu.Some.Total)
	require.Zero(t, availableBytes(before), "no limit")

	// The container exits: its cgroup goes, its CPU time and its page cache stay
	// with the pod's.
	write("5000000100", "20971520", "20000000")
	after, err := s.podCgroupSample(sb)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after.cpuNanos, before.cpuNanos)
	require.EqualValues(t, 20971520-20000000, after.memWS)

	// Without a cgroup parent: no pod cgroup (the sum of its tasks, pod.go).
	_, err = s.podCgroupSample(pod.Pod{ID: "p2", Config: &runtimeapi.PodSandboxConfig{}})
	require.ErrorIs(t, err, errNoDirect)
	// A missing file (the pod's cgroup went): not read.
	require.NoError(t, os.Remove(filepath.Join(pod1("cpuacct"), "cpuacct.usage")))
	_, err = s.podCgroupSample(sb)
	require.ErrorIs(t, err, errNoDirect)
}

// On a v2 host with the systemd driver the pod's cgroup is its slice's directory.
func TestPodCgroupV2Systemd(t *testing.T) {
	root := t.TempDir()
	s := &Collector{host: hostFS{cgroup2: root, unifiedOnly: true}, opts: Options{CgroupDriver: "systemd"}}
	sb := pod.Pod{ID: "p1", Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods-burstable-pod1.slice"}}}
	dir := filepath.Join(root, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice")
	writeFiles(t, dir, map[string]string{
		"cpu.stat": "usage_usec 2500\n", "memory.current": "8192\n", "memory.max": "65536\n",
		"memory.stat": "anon 4096\ninactive_file 1024\npgfault 3\npgmajfault 0\n", "pids.current": "4\n",
	})
	smp, err := s.podCgroupSample(sb)
	require.NoError(t, err)
	require.EqualValues(t, 2500*1000, smp.cpuNanos)
	require.EqualValues(t, 8192-1024, smp.memWS)
	require.EqualValues(t, 65536-(8192-1024), availableBytes(smp))
}
