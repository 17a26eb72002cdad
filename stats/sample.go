package stats

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/typeurl/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
)

// taskMetrics is what shimd reads of one task's cgroup: containerd's metrics (a
// *v1.Metrics or a *v2.Metrics, as the shim read them) and what shimd reads itself
// beside them (cgroupfs.go).
type taskMetrics struct {
	data any
	at   time.Time
	// group is the task's own cgroup2 group ("" when it has none: a v1 host without
	// the unified hierarchy, a task that did not join it, or one that has exited).
	group string
	// psi is the group's pressure as shimd read it on a hybrid v1 host (on v2 the
	// shim's metrics carry it: see pressure).
	psi psiSet
	// swapFile: the group has memory.swap.current (v2: the kernel accounts swap).
	swapFile bool
	// kernel is the "kernel" line of the v2 group's memory.stat (Linux 5.18 and
	// later), read for the metrics only (containerMetrics); nil elsewhere.
	kernel *uint64
}

// pressure is the task's PSI: the shim's on v2, shimd's own read on v1.
func (tm taskMetrics) pressure() psiSet {
	if d, ok := tm.data.(*v2.Metrics); ok {
		return psiSet{cpu: d.GetCPU().GetPSI(), memory: d.GetMemory().GetPSI(), io: d.GetIo().GetPSI()}
	}
	return tm.psi
}

// cgroupSample is what the CRI stats take of one task's cgroup (v1 or v2).
type cgroupSample struct {
	at              time.Time
	cpuNanos        uint64
	memUsage, memWS uint64
	// memLimit is the memory limit (0 or past unlimited: none).
	memLimit           uint64
	memRSS, pageFaults uint64
	majorPageFaults    uint64
	psi                psiSet
	// swap is nil where the kernel does not account swap for the cgroup.
	swap *swapSample
	// tasks is pids.current: processes and threads (nil without a pids controller).
	tasks *uint64
	group string
	// rate is the container's usage_nano_cores, once computed (rate.go).
	rate uint64
}

// swapSample is a cgroup's swap use and, when it has one, its swap limit.
type swapSample struct {
	usage   uint64
	limit   uint64
	limited bool
}

// unlimited is the size past which a memory or swap limit counts as none (the
// kernel rounds "max" down to a page multiple near 2^63), as cAdvisor and containerd
// take it.
const unlimited = uint64(1) << 62

// WorkingSet is the memory a task holds and cannot give back (usage less inactive
// file pages).
func WorkingSet(ctx context.Context, cl ctrd.ContainerLoader, id string) (uint64, error) {
	tm, err := readTask(ctx, cl, hostFS{}, id)
	if err != nil {
		return 0, err
	}
	smp, err := sampleOf(tm)
	return smp.memWS, err
}

// readTask reads a task's cgroup metrics through containerd, and what h has beside
// them (nothing for the zero hostFS).
func readTask(ctx context.Context, cl ctrd.ContainerLoader, h hostFS, id string) (taskMetrics, error) {
	_, task, err := ctrd.LoadTask(ctx, cl, id)
	if err != nil {
		return taskMetrics{}, err
	}
	m, err := task.Metrics(ctx)
	if err != nil {
		return taskMetrics{}, err
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return taskMetrics{}, fmt.Errorf("decode metrics of %s: %w", id, err)
	}
	return hostFacts(taskMetrics{data: data, at: m.Timestamp.AsTime(), group: h.ownGroup(task.Pid())}), nil
}

// hostFacts adds what shimd reads beside containerd's metrics in the task's own
// cgroup2 group: pressure on a hybrid v1 host, whether swap is accounted on v2.
func hostFacts(tm taskMetrics) taskMetrics {
	switch tm.data.(type) {
	case *v1.Metrics:
		tm.psi = readPSI(tm.group)
	case *v2.Metrics:
		tm.swapFile = hasFile(tm.group, "memory.swap.current")
	}
	return tm
}

// taskSample reads a task's cgroup through containerd (v1 and v2).
func (s *Collector) taskSample(ctx context.Context, id string) (cgroupSample, error) {
	tm, err := readTask(ctx, s.opts.Client, s.host, id)
	if err != nil {
		return cgroupSample{}, err
	}
	return sampleOf(tm)
}

// sampleOf converts a task's metrics. On v1 swap is memsw less memory (accounted when
// memory.memsw.* exist: the shim leaves their limit 0 when they do not); on v2
// memory.swap.current, accounted when that file exists (a swap.max of 0, the
// kubelet's NoSwap, still counts). pids.current counts tasks, threads included, as
// containerd reports it.
func sampleOf(tm taskMetrics) (cgroupSample, error) {
	out := cgroupSample{at: tm.at, psi: tm.pressure(), group: tm.group}
	switch d := tm.data.(type) {
	case *v1.Metrics:
		out.cpuNanos = d.GetCPU().GetUsage().GetTotal()
		mem := d.GetMemory()
		out.memUsage = mem.GetUsage().GetUsage()
		out.memWS = workingSet(out.memUsage, mem.GetTotalInactiveFile())
		out.memLimit = mem.GetUsage().GetLimit()
		out.memRSS, out.pageFaults, out.majorPageFaults = mem.GetTotalRSS(), mem.GetTotalPgFault(), mem.GetTotalPgMajFault()
		if sw := mem.GetSwap(); sw.GetLimit() > 0 {
			out.swap = &swapSample{}
			if sw.GetUsage() > out.memUsage {
				out.swap.usage = sw.GetUsage() - out.memUsage
			}
			if memLimit := mem.GetUsage().GetLimit(); sw.GetLimit() < unlimited && memLimit <= sw.GetLimit() {
				out.swap.limit, out.swap.limited = sw.GetLimit()-memLimit, true
			}
		}
		if p := d.GetPids(); p != nil {
			out.tasks = &p.Current
		}
	case *v2.Metrics:
		out.cpuNanos = d.GetCPU().GetUsageUsec() * 1000
		mem := d.GetMemory()
		out.memUsage = mem.GetUsage()
		out.memWS = workingSet(out.memUsage, mem.GetInactiveFile())
		out.memLimit = mem.GetUsageLimit()
		out.memRSS, out.pageFaults, out.majorPageFaults = mem.GetAnon(), mem.GetPgfault(), mem.GetPgmajfault()
		if tm.swapFile || mem.GetSwapUsage() > 0 || mem.GetSwapLimit() > 0 {
			out.swap = &swapSample{usage: mem.GetSwapUsage(), limit: mem.GetSwapLimit(), limited: mem.GetSwapLimit() < unlimited}
		}
		// A running task is in its group, so 0 means there is no pids.current.
		if p := d.GetPids(); p.GetCurrent() > 0 {
			out.tasks = &p.Current
		}
	default:
		return cgroupSample{}, fmt.Errorf("unknown metrics type %T", tm.data)
	}
	return out, nil
}

// criPSI converts the kernel's pressure (totals in microseconds) to the CRI's
// (nanoseconds); nil stays nil.
func criPSI(p *v2.PSIStats) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	conv := func(d *v2.PSIData) *runtimeapi.PsiData {
		if d == nil {
			return nil
		}
		return &runtimeapi.PsiData{Total: d.Total * 1000, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &runtimeapi.PsiStats{Full: conv(p.Full), Some: conv(p.Some)}
}

// cpuMem converts a sample to the CRI's CPU and memory usage, with their pressure;
// nanoCores is its usage_nano_cores (rate.go).
func cpuMem(smp cgroupSample, nanoCores uint64) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage) {
	ts := smp.at.UnixNano()
	return &runtimeapi.CpuUsage{
			Timestamp:            ts,
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: smp.cpuNanos},
			UsageNanoCores:       &runtimeapi.UInt64Value{Value: nanoCores},
			Psi:                  criPSI(smp.psi.cpu),
		}, &runtimeapi.MemoryUsage{
			Timestamp:       ts,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: smp.memWS},
			AvailableBytes:  &runtimeapi.UInt64Value{Value: availableBytes(smp)},
			UsageBytes:      &runtimeapi.UInt64Value{Value: smp.memUsage},
			RssBytes:        &runtimeapi.UInt64Value{Value: smp.memRSS},
			PageFaults:      &runtimeapi.UInt64Value{Value: smp.pageFaults},
			MajorPageFaults: &runtimeapi.UInt64Value{Value: smp.majorPageFaults},
			Psi:             criPSI(smp.psi.memory),
		}
}

// availableBytes is the memory limit less the working set, 0 without a limit (as
// containerd's CRI plugin and the kubelet take it).
func availableBytes(smp cgroupSample) uint64 {
	if smp.memLimit == 0 || smp.memLimit > unlimited || smp.memLimit < smp.memWS {
		return 0
	}
	return smp.memLimit - smp.memWS
}

// ioUsage is the CRI's IO usage: only pressure, so nil without it (as containerd).
func ioUsage(smp cgroupSample) *runtimeapi.IoUsage {
	if smp.psi.io == nil {
		return nil
	}
	return &runtimeapi.IoUsage{Timestamp: smp.at.UnixNano(), Psi: criPSI(smp.psi.io)}
}

// swapUsage is the CRI's swap usage; nil where swap is not accounted. Available is
// the limit less usage, left out without a limit.
func swapUsage(smp cgroupSample) *runtimeapi.SwapUsage {
	if smp.swap == nil {
		return nil
	}
	out := &runtimeapi.SwapUsage{Timestamp: smp.at.UnixNano(), SwapUsageBytes: &runtimeapi.UInt64Value{Value: smp.swap.usage}}
	if smp.swap.limited {
		var avail uint64
		if smp.swap.limit > smp.swap.usage {
			avail = smp.swap.limit - smp.swap.usage
		}
		out.SwapAvailableBytes = &runtimeapi.UInt64Value{Value: avail}
	}
	return out
}

// ContainerStats samples one container: CPU, memory, pressure, swap while it runs,
// and its writable layer.
func (s *Collector) ContainerStats(ctx context.Context, c Container) *runtimeapi.ContainerStats {
	st, _ := s.containerStats(ctx, nil, c)
	return st
}

// containerStats is ContainerStats with the pass's metrics if any; it also returns
// the running container's cgroup sample (nil when there is none).
func (s *Collector) containerStats(ctx context.Context, p *metricsPass, c Container) (*runtimeapi.ContainerStats, *cgroupSample) {
	out := &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id: c.ID, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations,
	}}
	now := time.Now().UnixNano()
	var sampled *cgroupSample
	if c.Running {
		if smp, err := s.sample(ctx, p, c.ID, c.Pid, c.KernelCgroups); err == nil {
			// The container's cgroup is new at its start: its CPU time is about 0 then.
			var start cpuPoint
			if c.StartedAt > 0 {
				start.at = time.Unix(0, c.StartedAt)
			}
			rate, _ := s.rates.rate(c.ID, cpuPoint{at: smp.at, nanos: smp.cpuNanos}, start)
			smp.rate = rate
			out.Cpu, out.Memory = cpuMem(smp, rate)
			out.Io, out.Swap = ioUsage(smp), swapUsage(smp)
			sampled = &smp
		}
	}
	if out.Cpu == nil {
		out.Cpu = &runtimeapi.CpuUsage{Timestamp: now}
		out.Memory = &runtimeapi.MemoryUsage{Timestamp: now}
	}
	root, rootErr := s.layerRoot(ctx, c)
	if size, inodes, err := s.writableLayer(ctx, c); err == nil && rootErr == nil {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: now,
			// The kubelet stats this path to find the filesystem.
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: root},
			UsedBytes:  &runtimeapi.UInt64Value{Value: uint64(size)},
			InodesUsed: &runtimeapi.UInt64Value{Value: uint64(inodes)},
		}
	}
	return out, sampled
}
