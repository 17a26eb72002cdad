//go:build integration

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cgroup1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// hostHasPSI tells whether the kernel keeps PSI per cgroup2 group where runc puts
// containers: a cgroup2 hierarchy (on a v1 host the hybrid one at
// /sys/fs/cgroup/unified) with pressure files.
func hostHasPSI() bool {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err != nil {
			continue
		}
		_, err := os.ReadFile(filepath.Join(dir, "cpu.pressure"))
		return err == nil
	}
	return false
}

// hostAccountsSwap tells whether the kernel accounts swap per cgroup (v1: memsw files).
func hostAccountsSwap() bool {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.usage_in_bytes"); err == nil {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil && len(mustGlob("/sys/fs/cgroup/*/memory.swap.current")) > 0
}

// readLog is a container's CRI log, for failure messages.
func readLog(p *podFixture, name string) string {
	data, _ := os.ReadFile(filepath.Join(p.logDir, name+".log"))
	return string(data)
}

func mustGlob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// The stats and metrics RPCs report what the kernel keeps beyond CPU and memory:
// pressure (PSI) of containers and of the pod's cgroup, swap, the pod's task count,
// and, as metrics, block I/O counters, threads and cAdvisor's pressure counters. A
// busy container runs two loops on one CPU, so they wait for each other (CPU
// pressure); another writes and reads 4 MiB with O_DIRECT (block I/O it issues
// itself, which cgroup v1 counts). A pod without a cgroup parent has no pod cgroup,
// so no pod pressure. Where the host lacks PSI or swap accounting, those fields must
// be nil, not zero.
func TestStatsPressureIOSwapProcesses(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	psi, swap := hostHasPSI(), hostAccountsSwap()
	t.Logf("host: PSI per cgroup2 group %v, swap accounted %v", psi, swap)

	parent := fmt.Sprintf("/shimd-e2e-stats-%d", os.Getpid())
	t.Cleanup(func() {
		// The containers' cgroups go when their tasks are deleted, which may be just
		// after RemovePodSandbox answers; runc leaves the parent it made.
		left := func() (out []string) {
			for _, d := range mustGlob(filepath.Join("/sys/fs/cgroup/*", parent)) {
				if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
					out = append(out, d)
				}
			}
			return out
		}
		for deadline := time.Now().Add(30 * time.Second); len(left()) > 0 && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
		}
		if l := left(); len(l) > 0 {
			t.Errorf("cgroups left: %v", l)
		}
	})
	cfg := podConfig("stats")
	cfg.Linux.CgroupParent = parent
	p := newPodOf(t, rs, cfg)
	busy := p.container("busy", "sh", "-c", "while :; do :; done & while :; do :; done")
	busy.Linux.Resources = &runtimeapi.LinuxContainerResources{CpusetCpus: "0", MemoryLimitInBytes: 64 << 20}
	busyID := p.run(busy)
	ioID := p.run(p.container("io", "sh", "-c",
		"dd if=/dev/zero of=/io.bin bs=64k count=64 oflag=direct && dd if=/io.bin of=/dev/null bs=64k iflag=direct && exec sleep 3600"))
	plain := newPod(t, rs, "stats-noparent")
	plainID := plain.run(plain.container("idle", "sleep", "3600"))

	// A container: CPU pressure grows while the loops wait for each other.
	var cs *runtimeapi.ContainerStats
	require.Eventually(t, func() bool {
		resp, err := rs.ContainerStats(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatsRequest{ContainerId: busyID})
		require.NoError(t, err)
		cs = resp.Stats
		return !psi || cs.Cpu.GetPsi().GetSome().GetTotal() > 0
	}, time.Minute, 500*time.Millisecond, "the busy container's CPU pressure never grew: %v", cs.GetCpu().GetPsi())
	t.Logf("busy container: cpu psi %v; memory psi %v; io %v; swap %v", cs.Cpu.Psi, cs.Memory.Psi, cs.Io, cs.Swap)
	if psi {
		require.NotNil(t, cs.Cpu.Psi.Full)
		require.NotNil(t, cs.Memory.Psi.GetSome())
		require.NotNil(t, cs.Io.GetPsi().GetSome())
		require.Equal(t, cs.Cpu.Timestamp, cs.Io.Timestamp)
	} else {
		require.Nil(t, cs.Cpu.Psi)
		require.Nil(t, cs.Memory.Psi)
		require.Nil(t, cs.Io)
	}
	if swap {
		require.NotNil(t, cs.Swap.GetSwapUsageBytes())
		require.Equal(t, cs.Memory.Timestamp, cs.Swap.Timestamp)
	} else {
		require.Nil(t, cs.Swap)
	}
	list, err := rs.ListContainerStats(ctxT(t, 30*time.Second), &runtimeapi.ListContainerStatsRequest{
		Filter: &runtimeapi.ContainerStatsFilter{Id: busyID}})
	require.NoError(t, err)
	require.Len(t, list.Stats, 1)
	require.Equal(t, psi, list.Stats[0].Cpu.Psi != nil)
	require.Equal(t, swap, list.Stats[0].Swap != nil)

	// The pod: its cgroup's pressure and the tasks of its containers, as containerd's
	// CRI counts them (the pause process left out): two in busy, one in io.
	ps, err := rs.PodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: p.id})
	require.NoError(t, err)
	pl := ps.Stats.Linux
	t.Logf("pod: cpu psi %v; memory psi %v; io %v; processes %v", pl.Cpu.Psi, pl.Memory.Psi, pl.Io, pl.Process.ProcessCount)
	require.NotNil(t, pl.Process.ProcessCount)
	require.Equal(t, uint64(3), pl.Process.ProcessCount.Value)
	require.Len(t, pl.Containers, 2)
	if psi {
		require.Greater(t, pl.Cpu.Psi.GetSome().GetTotal(), uint64(0), "the pod's cgroup holds the busy container")
		require.NotNil(t, pl.Memory.Psi)
		require.NotNil(t, pl.Io.GetPsi())
	} else {
		require.Nil(t, pl.Cpu.Psi)
		require.Nil(t, pl.Io)
	}
	pls, err := rs.ListPodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.ListPodSandboxStatsRequest{
		Filter: &runtimeapi.PodSandboxStatsFilter{Id: p.id}})
	require.NoError(t, err)
	require.Len(t, pls.Stats, 1)
	// The list reads every task's metrics in one call (stats/batch.go): the same
	// figures as the pod's own call.
	ll := pls.Stats[0].Linux
	require.Equal(t, pl.Process.ProcessCount.Value, ll.Process.ProcessCount.GetValue())
	require.Len(t, ll.Containers, 2)
	require.Equal(t, psi, ll.Cpu.Psi != nil)
	require.NotZero(t, ll.Memory.GetWorkingSetBytes().GetValue())
	for _, c := range ll.Containers {
		require.NotNil(t, c.Cpu.GetUsageCoreNanoSeconds(), c.Attributes.Id)
		require.NotZero(t, c.Memory.GetWorkingSetBytes().GetValue(), c.Attributes.Id)
		require.NotNil(t, c.WritableLayer, c.Attributes.Id)
	}

	// A pod without a cgroup parent has no cgroup of its own: no pod pressure, while
	// its container has its own.
	ps, err = rs.PodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: plain.id})
	require.NoError(t, err)
	require.Nil(t, ps.Stats.Linux.Cpu.Psi)
	require.Nil(t, ps.Stats.Linux.Io)
	require.Len(t, ps.Stats.Linux.Containers, 1)
	require.Equal(t, plainID, ps.Stats.Linux.Containers[0].Attributes.Id)
	require.Equal(t, psi, ps.Stats.Linux.Containers[0].Cpu.Psi != nil)

	// The metrics: block I/O per device, threads, pressure counters.
	dr, err := rs.ListMetricDescriptors(ctxT(t, time.Minute), &runtimeapi.ListMetricDescriptorsRequest{})
	require.NoError(t, err)
	descs := map[string][]string{}
	for _, d := range dr.Descriptors {
		descs[d.Name] = d.LabelKeys
	}
	for _, name := range []string{"container_fs_reads_bytes_total", "container_fs_writes_bytes_total", "container_fs_reads_total",
		"container_fs_writes_total", "container_threads", "container_pressure_cpu_waiting_seconds_total",
		"container_pressure_cpu_stalled_seconds_total", "container_pressure_memory_waiting_seconds_total",
		"container_pressure_memory_stalled_seconds_total", "container_pressure_io_waiting_seconds_total",
		"container_pressure_io_stalled_seconds_total"} {
		require.Contains(t, descs, name)
	}
	require.Equal(t, "device", descs["container_fs_writes_bytes_total"][5])

	var mine map[string]map[string][]criMetric
	sumIO := func(name string) (total uint64) {
		for _, m := range mine[ioID][name] {
			total += m.value
		}
		return total
	}
	// cgroup v1 keeps block I/O counters only once blk-throttle is set up on the disk
	// (kernels since 6.x do that at the first throttle rule anyone sets): shimd
	// reports what the io container's own blkio files hold, and nothing when they
	// hold no device.
	kernelIO := func() string {
		data, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/blkio", parent, ioID, "blkio.throttle.io_service_bytes"))
		return string(data)
	}
	ioDone := func() bool { return strings.Count(readLog(p, "io"), "records out") == 2 }
	done := func() bool {
		resp, err := rs.ListPodSandboxMetrics(ctxT(t, time.Minute), &runtimeapi.ListPodSandboxMetricsRequest{})
		require.NoError(t, err)
		for _, pm := range resp.PodMetrics {
			if pm.PodSandboxId == p.id {
				mine = podSandboxMetrics(t, descs, pm)
			}
		}
		waiting := mine[busyID]["container_pressure_cpu_waiting_seconds_total"]
		return ioDone() && (!strings.Contains(kernelIO(), " Write ") || sumIO("container_fs_writes_bytes_total") >= 4<<20) &&
			(!psi || len(waiting) == 1 && waiting[0].value >= 1)
	}
	for deadline := time.Now().Add(time.Minute); !done() && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
	}
	require.True(t, done(), "io container: %v; busy container: %v; io log: %s", mine[ioID], mine[busyID], readLog(p, "io"))
	t.Logf("io container's blkio.throttle.io_service_bytes:\n%s", kernelIO())
	if strings.Contains(kernelIO(), " Write ") {
		for _, name := range []string{"container_fs_reads_bytes_total", "container_fs_writes_bytes_total", "container_fs_reads_total", "container_fs_writes_total"} {
			for _, m := range mine[ioID][name] {
				t.Logf("io container: %s{device=%q} %d", name, m.labels["device"], m.value)
				require.NotEmpty(t, m.labels["device"])
			}
		}
		require.GreaterOrEqual(t, sumIO("container_fs_reads_bytes_total"), uint64(4<<20))
		require.GreaterOrEqual(t, sumIO("container_fs_reads_total"), uint64(64), "64 reads of 64 KiB at least")
		require.GreaterOrEqual(t, sumIO("container_fs_writes_total"), uint64(64))
	} else {
		for _, name := range []string{"container_fs_reads_bytes_total", "container_fs_writes_bytes_total", "container_fs_reads_total", "container_fs_writes_total"} {
			require.Empty(t, mine[ioID][name], "the kernel keeps no block I/O counters for the container")
		}
	}
	b := mine[busyID]
	require.Equal(t, uint64(2), b["container_processes"][0].value, "sh and its background loop")
	require.Equal(t, uint64(2), b["container_threads"][0].value)
	require.Equal(t, swap, len(b["container_memory_swap"]) == 1)
	for owner, ms := range map[string]map[string][]criMetric{"busy": b, "pod": mine[""]} {
		for _, name := range []string{"cpu", "memory", "io"} {
			for _, kind := range []string{"waiting", "stalled"} {
				vals := ms["container_pressure_"+name+"_"+kind+"_seconds_total"]
				t.Logf("%s: container_pressure_%s_%s_seconds_total %v", owner, name, kind, vals)
				require.Equal(t, psi, len(vals) == 1, "%s %s %s", owner, name, kind)
			}
		}
	}
	if psi {
		require.Equal(t, map[string]string{"pod": "stats", "namespace": "e2e", "container": "", "id": p.id, "image": ""},
			mine[""]["container_pressure_cpu_waiting_seconds_total"][0].labels)
	}

	stopRemove(t, rs, p.id)
	stopRemove(t, rs, plain.id)
}

// The stats lists read a runc task's cgroup files themselves and a pod's network
// counters from its pause process's /proc (stats/direct.go): their figures must be
// those containerd's own metrics give for the same tasks, and those of the pod's
// interfaces. A container writes 20 MiB to its pod's /dev/shm (shared memory, charged to its
// cgroup and in its working set) and then sleeps, so both reads see the
// same memory; connections from the host to a closed port of the pod give its interface bytes.
func TestStatsListsMatchContainerd(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPodOf(t, rs, pausePodConfig("stats-direct")) // pause-less: TestPauselessPodStatsList
	id := p.run(p.container("holder", "sh", "-c", "dd if=/dev/zero of=/dev/shm/held bs=1M count=20 && echo held; sleep 3600"))
	require.Eventually(t, func() bool { return strings.Contains(readLog(p, "holder"), "held") }, time.Minute, 100*time.Millisecond, "the container holds its memory")
	ip := podStatus(t, rs, p.id).Network.Ip
	for range 3 { // a SYN in, a RST out: the port is closed
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "9"), 2*time.Second); err == nil {
			c.Close()
		}
	}

	ctx := ctxT(t, time.Minute)
	cs, err := rs.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	require.NoError(t, err)
	ps, err := rs.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	require.NoError(t, err)

	cl := env.Containerd.Client(t)
	nsCtx := namespaces.WithNamespace(ctx, env.Shimd.Namespace())
	ws := func(taskID string) (workingSet, cpu uint64) {
		task, err := cl.TaskService().Metrics(nsCtx, &tasksapi.MetricsRequest{Filters: []string{"id==" + taskID}})
		require.NoError(t, err)
		require.Len(t, task.Metrics, 1, taskID)
		data, err := typeurl.UnmarshalAny(task.Metrics[0].Data)
		require.NoError(t, err)
		switch m := data.(type) {
		case *cgroup1.Metrics:
			return m.Memory.Usage.Usage - min(m.Memory.Usage.Usage, m.Memory.TotalInactiveFile), m.CPU.Usage.Total
		case *cgroup2.Metrics:
			return m.Memory.Usage - min(m.Memory.Usage, m.Memory.InactiveFile), m.CPU.UsageUsec * 1000
		}
		t.Fatalf("metrics of %T", data)
		return 0, 0
	}
	require.Len(t, cs.Stats, 1)
	c := cs.Stats[0]
	require.Equal(t, id, c.Attributes.Id)
	ctrWS, ctrCPU := ws(id)
	t.Logf("container: working set %d (containerd %d), CPU %d ns (containerd %d)",
		c.Memory.WorkingSetBytes.GetValue(), ctrWS, c.Cpu.UsageCoreNanoSeconds.GetValue(), ctrCPU)
	require.Greater(t, ctrWS, uint64(20e6), "containerd's working set of the holder")
	require.InDelta(t, float64(ctrWS), float64(c.Memory.WorkingSetBytes.GetValue()), 2<<20, "working set: shimd's read against containerd's")
	require.LessOrEqual(t, c.Cpu.UsageCoreNanoSeconds.GetValue(), ctrCPU, "CPU read before containerd's")
	require.InDelta(t, float64(ctrCPU), float64(c.Cpu.UsageCoreNanoSeconds.GetValue()), 50e6, "CPU: shimd's read against containerd's")

	require.Len(t, ps.Stats, 1)
	pl := ps.Stats[0].Linux
	pauseWS, _ := ws(p.id)
	require.InDelta(t, float64(ctrWS+pauseWS), float64(pl.Memory.WorkingSetBytes.GetValue()), 2<<20, "pod working set: pause + holder")
	require.NotNil(t, pl.Network, "pod network counters")
	eth0 := pl.Network.DefaultInterface
	require.Equal(t, "eth0", eth0.Name)
	require.Greater(t, eth0.RxBytes.GetValue(), uint64(3*60), "3 SYNs in")
	require.Greater(t, eth0.TxBytes.GetValue(), uint64(3*40), "3 RSTs out")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}
