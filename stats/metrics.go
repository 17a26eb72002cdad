package stats

import (
	"context"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// Descriptors describes every metric PodMetrics reports.
func Descriptors() []*runtimeapi.MetricDescriptor {
	var out []*runtimeapi.MetricDescriptor
	for _, d := range metricDescs {
		out = append(out, &runtimeapi.MetricDescriptor{
			Name: d.name, Help: d.help, LabelKeys: append([]string(nil), d.labels...),
		})
	}
	return out
}

// PodMetrics reads a pod's metrics and its running containers'.
func (s *Collector) PodMetrics(ctx context.Context, sb pod.Pod) *runtimeapi.PodSandboxMetrics {
	meta := sb.Config.GetMetadata()
	out := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.ID}
	if sb.NetNSPath != "" {
		ifaces, err := network.Interfaces(sb.NetNSPath)
		if err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Debug("pod metrics: network counters")
		}
		pod := metricSet{labels: []string{meta.GetName(), meta.GetNamespace(), "", sb.ID, ""}}
		for _, it := range ifaces {
			networkMetrics(&pod, it)
		}
		out.Metrics = pod.out
	}
	for _, c := range s.opts.Containers.StatsOf(sb.ID) {
		if cm := s.containerMetrics(ctx, c, meta); cm != nil {
			out.ContainerMetrics = append(out.ContainerMetrics, cm)
		}
	}
	return out
}

// containerMetrics reads one running container; nil if it is not running or its
// cgroup cannot be read.
func (s *Collector) containerMetrics(ctx context.Context, c Container, pod *runtimeapi.PodSandboxMetadata) *runtimeapi.ContainerMetrics {
	if !c.Running {
		return nil
	}
	data, _, err := taskCgroupMetrics(ctx, s.opts.Client, c.ID)
	if err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("container metrics: cgroup")
		return nil
	}
	m := metricSet{labels: []string{pod.GetName(), pod.GetNamespace(), c.Metadata.GetName(), c.ID, c.ImageName}}
	cgroupMetrics(&m, data)
	m.add(mLastSeen, uint64(time.Now().Unix()))
	m.add(mStartTime, uint64(time.Unix(0, c.StartedAt).Unix()))
	specMetrics(&m, c.Resources)
	root, rootErr := s.opts.Images.SnapshotterRoot(ctx, c.Snapshotter)
	if u, err := s.opts.Client.SnapshotService(c.Snapshotter).Usage(ctx, c.ID); err == nil && rootErr == nil {
		m.add(mFsUsage, uint64(u.Size), root)
	}
	return &runtimeapi.ContainerMetrics{ContainerId: c.ID, Metrics: m.out}
}

func networkMetrics(m *metricSet, it network.InterfaceStats) {
	m.add(mNetRxBytes, it.RxBytes, it.Name)
	m.add(mNetRxPackets, it.RxPackets, it.Name)
	m.add(mNetRxDropped, it.RxDropped, it.Name)
	m.add(mNetRxErrors, it.RxErrors, it.Name)
	m.add(mNetTxBytes, it.TxBytes, it.Name)
	m.add(mNetTxPackets, it.TxPackets, it.Name)
	m.add(mNetTxDropped, it.TxDropped, it.Name)
	m.add(mNetTxErrors, it.TxErrors, it.Name)
}

// specMetrics reports the container's current limits; a limit that is not set is
// left out.
func specMetrics(m *metricSet, r *runtimeapi.LinuxContainerResources) {
	for _, v := range []struct {
		d metricDesc
		v int64
	}{
		{mSpecCPUPeriod, r.GetCpuPeriod()}, {mSpecCPUQuota, r.GetCpuQuota()}, {mSpecCPUShares, r.GetCpuShares()},
		{mSpecMemLimit, r.GetMemoryLimitInBytes()}, {mSpecMemSwapLimit, r.GetMemorySwapLimitInBytes()},
	} {
		if v.v > 0 {
			m.add(v.d, uint64(v.v))
		}
	}
}

// cgroupMetrics converts a task's cgroup v1 or v2 metrics. CPU times are whole
// seconds: a CRI metric value is an integer.
func cgroupMetrics(m *metricSet, data any) {
	const sec = uint64(time.Second)
	switch d := data.(type) {
	case *v1.Metrics:
		cpu := d.GetCPU()
		m.add(mCPUUsage, cpu.GetUsage().GetTotal()/sec)
		m.add(mCPUUser, cpu.GetUsage().GetUser()/sec)
		m.add(mCPUSystem, cpu.GetUsage().GetKernel()/sec)
		m.add(mCPUPeriods, cpu.GetThrottling().GetPeriods())
		m.add(mCPUThrottled, cpu.GetThrottling().GetThrottledPeriods())
		m.add(mCPUThrottledSecs, cpu.GetThrottling().GetThrottledTime()/sec)
		mem := d.GetMemory()
		usage := mem.GetUsage().GetUsage()
		m.add(mMemCache, mem.GetTotalCache())
		m.add(mMemRSS, mem.GetTotalRSS())
		m.add(mMemMapped, mem.GetTotalMappedFile())
		if sw := mem.GetSwap().GetUsage(); sw > usage {
			m.add(mMemSwap, sw-usage) // memsw counts memory and swap
		} else {
			m.add(mMemSwap, 0)
		}
		m.add(mMemFailcnt, mem.GetUsage().GetFailcnt())
		m.add(mMemUsage, usage)
		m.add(mMemMaxUsage, mem.GetUsage().GetMax())
		m.add(mMemWorkingSet, workingSet(usage, mem.GetTotalInactiveFile()))
		m.add(mMemActiveFile, mem.GetTotalActiveFile())
		m.add(mMemInactiveFile, mem.GetTotalInactiveFile())
		memoryFailures(m, mem.GetTotalPgFault(), mem.GetTotalPgMajFault())
		m.add(mOOMEvents, d.GetMemoryOomControl().GetOomKill())
		m.add(mProcesses, d.GetPids().GetCurrent())
		m.add(mThreadsMax, d.GetPids().GetLimit())
	case *v2.Metrics:
		const usec = uint64(time.Second / time.Microsecond)
		cpu := d.GetCPU()
		m.add(mCPUUsage, cpu.GetUsageUsec()/usec)
		m.add(mCPUUser, cpu.GetUserUsec()/usec)
		m.add(mCPUSystem, cpu.GetSystemUsec()/usec)
		m.add(mCPUPeriods, cpu.GetNrPeriods())
		m.add(mCPUThrottled, cpu.GetNrThrottled())
		m.add(mCPUThrottledSecs, cpu.GetThrottledUsec()/usec)
		mem := d.GetMemory()
		m.add(mMemCache, mem.GetFile())
		m.add(mMemRSS, mem.GetAnon())
		m.add(mMemMapped, mem.GetFileMapped())
		m.add(mMemSwap, mem.GetSwapUsage())
		m.add(mMemUsage, mem.GetUsage())
		if mx := mem.GetMaxUsage(); mx > 0 {
			m.add(mMemMaxUsage, mx)
		}
		m.add(mMemWorkingSet, workingSet(mem.GetUsage(), mem.GetInactiveFile()))
		m.add(mMemActiveFile, mem.GetActiveFile())
		m.add(mMemInactiveFile, mem.GetInactiveFile())
		memoryFailures(m, mem.GetPgfault(), mem.GetPgmajfault())
		m.add(mOOMEvents, d.GetMemoryEvents().GetOomKill())
		m.add(mProcesses, d.GetPids().GetCurrent())
		m.add(mThreadsMax, d.GetPids().GetLimit())
	}
}

// memoryFailures are cAdvisor's page fault counters (failure_type, scope).
func memoryFailures(m *metricSet, faults, major uint64) {
	m.add(mMemFailures, faults, "pgfault", "container")
	m.add(mMemFailures, major, "pgmajfault", "container")
}

// workingSet is usage less the inactive file cache, as the kubelet computes it.
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile < usage {
		return usage - inactiveFile
	}
	return 0
}
