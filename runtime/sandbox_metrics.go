package runtime

import (
	"context"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/sandbox"
)

// ListMetricDescriptors lists the metrics ListPodSandboxMetrics reports (see
// sandbox_metrics_descriptors.go). It needs no state, so it answers during recovery
// too: the kubelet asks once, when it starts.
func (s *Service) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	resp := &runtimeapi.ListMetricDescriptorsResponse{}
	for _, d := range metricDescs {
		resp.Descriptors = append(resp.Descriptors, &runtimeapi.MetricDescriptor{
			Name: d.name, Help: d.help, LabelKeys: append([]string(nil), d.labels...),
		})
	}
	return resp, nil
}

// ListPodSandboxMetrics reports every READY pod: its network counters per interface
// (pod level) and, for each running container, CPU, memory, processes, writable layer,
// start time and resource limits, read live (Timestamp 0) from the same cgroup, netns
// and snapshot data as the stats RPCs. A pod or container whose data cannot be read
// (it is going away) is left out, not an error.
func (s *Service) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	resp := &runtimeapi.ListPodSandboxMetricsResponse{}
	for _, sb := range s.opts.Sandboxes.List() {
		if sb.State() != sandbox.StateReady {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp.PodMetrics = append(resp.PodMetrics, s.podMetrics(ctx, sb))
	}
	return resp, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics as a stream.
func (s *Service) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxMetricsServer) error {
	resp, err := s.ListPodSandboxMetrics(stream.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		return err
	}
	return sendChunks(resp.PodMetrics, func(c []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c})
	})
}

func (s *Service) podMetrics(ctx context.Context, sb *sandbox.Sandbox) *runtimeapi.PodSandboxMetrics {
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
	for _, c := range s.containers.inSandbox(sb.ID) {
		if cm := s.containerMetrics(ctx, c, meta); cm != nil {
			out.ContainerMetrics = append(out.ContainerMetrics, cm)
		}
	}
	return out
}

// containerMetrics reads one running container; nil if it is not running or its
// cgroup cannot be read.
func (s *Service) containerMetrics(ctx context.Context, c *Container, pod *runtimeapi.PodSandboxMetadata) *runtimeapi.ContainerMetrics {
	st := c.Status()
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	data, _, err := s.taskCgroupMetrics(ctx, c.ID)
	if err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("container metrics: cgroup")
		return nil
	}
	m := metricSet{labels: []string{pod.GetName(), pod.GetNamespace(), c.Config.GetMetadata().GetName(), c.ID, c.ImageName}}
	cgroupMetrics(&m, data)
	m.add(mLastSeen, uint64(time.Now().Unix()))
	m.add(mStartTime, uint64(time.Unix(0, st.StartedAt).Unix()))
	specMetrics(&m, c.Resources())
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
