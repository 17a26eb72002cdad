package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// advancingRoot is an Images whose SnapshotterRoot lets time pass while a container's
// stats are taken: each call makes every running container's cgroup use more CPU,
// and the pod's (their parent, with an exited container's time in it) by as much.
type advancingRoot struct {
	t      *testing.T
	podDir string
	ctrs   []string // the containers' cgroup dirs
	usec   []uint64 // their usage_usec
	exited uint64   // the exited container's usage_usec, in the pod's
	step   uint64
}

func (a *advancingRoot) write() {
	pod := a.exited
	for i, dir := range a.ctrs {
		writeFiles(a.t, dir, map[string]string{"cpu.stat": "usage_usec " + strconv.FormatUint(a.usec[i], 10) + "\n"})
		pod += a.usec[i]
	}
	writeFiles(a.t, a.podDir, map[string]string{"cpu.stat": "usage_usec " + strconv.FormatUint(pod, 10) + "\n"})
}

func (a *advancingRoot) SnapshotterRoot(context.Context, string) (string, error) {
	for i := range a.usec {
		a.usec[i] += a.step
	}
	a.write()
	return a.t.TempDir(), nil
}

// The pod's CPU in a PodSandboxStats answer holds its containers' in the same answer
// (and an exited one's, in the pod's cgroup), though they keep running while each is
// read: the pod's cgroup is read after them.
func TestPodCPUHoldsItsContainers(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	podDir := filepath.Join(root, "kubepods/pod1")
	a := &advancingRoot{t: t, podDir: podDir, exited: 1_000, step: 5_000}
	var cs []Container
	for i := range 3 {
		pid := uint32(100 + i)
		rel := fmt.Sprintf("/kubepods/pod1/c%d", i)
		writeFiles(t, filepath.Join(proc, strconv.Itoa(int(pid))), map[string]string{"cgroup": "0::" + rel + "\n"})
		a.ctrs, a.usec = append(a.ctrs, filepath.Join(root, rel)), append(a.usec, 30_000)
		cs = append(cs, Container{ID: fmt.Sprintf("c%d", i), SandboxID: "p1", Running: true, Pid: pid, KernelCgroups: true,
			WritableUpper: t.TempDir()})
	}
	for _, dir := range append([]string{podDir}, a.ctrs...) {
		writeFiles(t, dir, map[string]string{"memory.current": "8192\n", "memory.max": "max\n",
			"memory.stat": "anon 4096\ninactive_file 0\npgfault 1\npgmajfault 0\n", "pids.current": "1\n"})
	}
	a.write()
	s := &Collector{host: hostFS{proc: proc, cgroup2: root, unifiedOnly: true},
		opts: Options{CgroupDriver: "cgroupfs", Images: a}}
	sb := pod.Pod{ID: "p1", Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod1"}}}

	for round := range 3 {
		st := s.podStats(context.Background(), nil, sb, cs)
		var ctrs uint64
		for _, c := range st.Linux.Containers {
			require.NotNil(t, c.Cpu.UsageCoreNanoSeconds, "round %d: %s's CPU", round, c.Attributes.Id)
			ctrs += c.Cpu.UsageCoreNanoSeconds.Value
		}
		podCPU := st.Linux.Cpu.UsageCoreNanoSeconds.Value
		require.GreaterOrEqual(t, podCPU, ctrs+a.exited*1000, "round %d: the pod's CPU holds its containers' and the exited one's", round)
		require.EqualValues(t, 3, st.Linux.Process.ProcessCount.Value, "round %d: the containers' processes", round)
	}
}

// Without a pod cgroup (no cgroup parent) a pod with a pause is the sum of its pause
// task's group and its running containers': the pause's process is not counted, and
// with no container running 0 processes are known.
func TestPodWithoutCgroupSumsPauseAndContainers(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	group := func(pid uint32, rel string, usec uint64) {
		writeFiles(t, filepath.Join(proc, strconv.Itoa(int(pid))), map[string]string{"cgroup": "0::" + rel + "\n"})
		writeFiles(t, filepath.Join(root, rel), map[string]string{"cpu.stat": "usage_usec " + strconv.FormatUint(usec, 10) + "\n",
			"memory.current": "8192\n", "memory.max": "max\n",
			"memory.stat": "anon 4096\ninactive_file 0\npgfault 1\npgmajfault 0\n", "pids.current": "1\n"})
	}
	group(10, "/ns/pause", 700)
	group(11, "/ns/c0", 20_000)
	group(12, "/ns/c1", 30_000)
	s := &Collector{host: hostFS{proc: proc, cgroup2: root, unifiedOnly: true}, opts: Options{CgroupDriver: "cgroupfs",
		Images:   &advancingRoot{t: t, podDir: filepath.Join(root, "unused")},
		Handlers: pod.Handlers{Default: "runc", ByName: map[string]pod.Handler{"runc": {PauseOptional: true}}}}}
	sb := pod.Pod{ID: "p1", PID: 10, Config: &runtimeapi.PodSandboxConfig{}}
	cs := []Container{
		{ID: "c0", Running: true, Pid: 11, KernelCgroups: true, WritableUpper: t.TempDir()},
		{ID: "c1", Running: true, Pid: 12, KernelCgroups: true, WritableUpper: t.TempDir()},
	}
	st := s.podStats(context.Background(), nil, sb, cs)
	require.EqualValues(t, (700+20_000+30_000)*1000, st.Linux.Cpu.UsageCoreNanoSeconds.Value, "the pause's and the containers' CPU")
	require.EqualValues(t, 2, st.Linux.Process.ProcessCount.Value, "the containers' processes, not the pause's")

	cs[0].Running, cs[1].Running = false, false
	st = s.podStats(context.Background(), nil, sb, cs)
	require.EqualValues(t, 700*1000, st.Linux.Cpu.UsageCoreNanoSeconds.Value, "the pause's CPU")
	require.NotNil(t, st.Linux.Process.ProcessCount, "no container runs: a count of 0 is known")
	require.Zero(t, st.Linux.Process.ProcessCount.Value)
}
