package stats

import (
	"context"
	"strconv"
	"strings"
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

// PodMetrics reads a pod's metrics and its running containers'. The pod's own are
// its network counters and its cgroup's pressure.
func (s *Collector) PodMetrics(ctx context.Context, sb pod.Pod) *runtimeapi.PodSandboxMetrics {
	meta := sb.Config.GetMetadata()
	out := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.ID}
	groups := []string{s.host.ownGroup(sb.PID)}
	cs := s.opts.Containers.StatsOf(sb.ID)
	for _, c := range cs {
		if cm, group := s.containerMetrics(ctx, c, meta); cm != nil {
			out.ContainerMetrics = append(out.ContainerMetrics, cm)
			groups = append(groups, group)
		}
	}
	pod := metricSet{labels: []string{meta.GetName(), meta.GetNamespace(), "", sb.ID, ""}}
	if sb.NetNSPath != "" {
		ifaces, err := podInterfaces(sb, cs)
		if err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Debug("pod metrics: network counters")
		}
		for _, it := range ifaces {
			networkMetrics(&pod, it)
		}
	}
	pressureMetrics(&pod, s.podPSI(sb, groups...))
	out.Metrics = pod.out
	return out
}

// containerMetrics reads one running container; nil if it is not running or its
// cgroup cannot be read.
func (s *Collector) containerMetrics(ctx context.Context, c Container, pod *runtimeapi.PodSandboxMetadata) (*runtimeapi.ContainerMetrics, string) {
	if !c.Running {
		return nil, ""
	}
	tm, err := readTask(ctx, s.opts.Client, s.host, c.ID)
	if err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("container metrics: cgroup")
		return nil, ""
	}
	m := metricSet{labels: []string{pod.GetName(), pod.GetNamespace(), c.Metadata.GetName(), c.ID, c.ImageName}}
	if _, ok := tm.data.(*v2.Metrics); ok {
		tm.kernel = kernelMemory(tm.group)
	}
	cgroupMetrics(&m, tm, s.host.blockDevice)
	m.add(mLastSeen, uint64(time.Now().Unix()))
	m.add(mStartTime, uint64(time.Unix(0, c.StartedAt).Unix()))
	specMetrics(&m, c.Resources)
	if pids, err := s.containerPids(ctx, c); err == nil {
		fds, sockets := countFDs(s.host.proc, pids)
		m.add(mFileDescriptors, fds)
		m.add(mSockets, sockets)
	} else {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("container metrics: processes")
	}
	if root, err := s.layerRoot(ctx, c); err == nil {
		if size, _, err := s.writableLayer(ctx, c); err == nil {
			m.add(mFsUsage, uint64(size), root)
		}
		if fs, err := fsCapacityOf(root); err == nil {
			m.add(mFsLimit, fs.bytes, root)
			m.add(mFsInodesTotal, fs.inodes, root)
			m.add(mFsInodesFree, fs.inodesFree, root)
		}
	}
	return &runtimeapi.ContainerMetrics{ContainerId: c.ID, Metrics: m.out}, tm.group
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

// cgroupMetrics converts a task's cgroup v1 or v2 metrics; dev names a block device.
// CPU times are whole seconds: a CRI metric value is an integer.
func cgroupMetrics(m *metricSet, tm taskMetrics, dev func(major, minor uint64) string) {
	const sec = uint64(time.Second)
	smp, err := sampleOf(tm)
	if err != nil {
		return
	}
	switch d := tm.data.(type) {
	case *v1.Metrics:
		cpu := d.GetCPU()
		m.add(mCPUUsage, cpu.GetUsage().GetTotal()/sec)
		m.add(mCPUUser, cpu.GetUsage().GetUser()/sec)
		m.add(mCPUSystem, cpu.GetUsage().GetKernel()/sec)
		m.add(mCPUPeriods, cpu.GetThrottling().GetPeriods())
		m.add(mCPUThrottled, cpu.GetThrottling().GetThrottledPeriods())
		m.add(mCPUThrottledSecs, cpu.GetThrottling().GetThrottledTime()/sec)
		mem := d.GetMemory()
		m.add(mMemCache, mem.GetTotalCache())
		m.add(mMemRSS, mem.GetTotalRSS())
		m.add(mMemMapped, mem.GetTotalMappedFile())
		m.add(mMemFailcnt, mem.GetUsage().GetFailcnt())
		m.add(mMemUsage, smp.memUsage)
		m.add(mMemMaxUsage, mem.GetUsage().GetMax())
		m.add(mMemWorkingSet, smp.memWS)
		m.add(mMemActiveFile, mem.GetTotalActiveFile())
		m.add(mMemInactiveFile, mem.GetTotalInactiveFile())
		memoryFailures(m, mem.GetTotalPgFault(), mem.GetTotalPgMajFault())
		m.add(mOOMEvents, d.GetMemoryOomControl().GetOomKill())
		if k := mem.GetKernel(); k != nil { // memory.kmem.usage_in_bytes
			m.add(mMemKernel, k.GetUsage())
		}
		if d.GetPids() != nil {
			m.add(mThreadsMax, d.GetPids().GetLimit()) // "max" reads as 0
		}
		ioMetrics(m, blkioCounters(d.GetBlkio(), dev))
		deviceMetrics(m, blkioDeviceBytes(d.GetBlkio(), dev))
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
		m.add(mMemUsage, smp.memUsage)
		if mx := mem.GetMaxUsage(); mx > 0 {
			m.add(mMemMaxUsage, mx)
		}
		m.add(mMemWorkingSet, smp.memWS)
		m.add(mMemActiveFile, mem.GetActiveFile())
		m.add(mMemInactiveFile, mem.GetInactiveFile())
		memoryFailures(m, mem.GetPgfault(), mem.GetPgmajfault())
		m.add(mOOMEvents, d.GetMemoryEvents().GetOomKill())
		if tm.kernel != nil {
			m.add(mMemKernel, *tm.kernel)
		} else {
			m.add(mMemKernel, mem.GetKernelStack()) // before Linux 5.18, as containerd reports it
		}
		if smp.tasks != nil {
			limit := d.GetPids().GetLimit()
			if limit >= unlimited {
				limit = 0 // "max": cAdvisor's infinity
			}
			m.add(mThreadsMax, limit)
		}
		ioMetrics(m, ioStatCounters(d.GetIo(), dev))
		deviceMetrics(m, ioStatDeviceBytes(d.GetIo(), dev))
	}
	if smp.swap != nil {
		m.add(mMemSwap, smp.swap.usage)
	}
	if smp.tasks != nil {
		// pids.current counts threads: the processes as containerd reports them.
		m.add(mProcesses, *smp.tasks)
		m.add(mThreads, *smp.tasks)
	}
	pressureMetrics(m, smp.psi)
}

// ioCounter is one block device's I/O of a cgroup.
type ioCounter struct {
	device                               string
	readBytes, writeBytes, reads, writes uint64
}

// blkioCounters sums cgroup v1's blkio counters (the CFQ/BFQ recursive files or,
// as the shim falls back, the throttle ones) per device.
func blkioCounters(b *v1.BlkIOStat, dev func(major, minor uint64) string) []ioCounter {
	var out []ioCounter
	at := map[[2]uint64]int{}
	add := func(e *v1.BlkIOEntry, bytes bool) {
		key := [2]uint64{e.GetMajor(), e.GetMinor()}
		i, ok := at[key]
		if !ok {
			name := e.GetDevice()
			if name == "" {
				name = dev(e.GetMajor(), e.GetMinor())
			}
			i = len(out)
			at[key] = i
			out = append(out, ioCounter{device: name})
		}
		c := &out[i]
		switch {
		case strings.EqualFold(e.GetOp(), "read") && bytes:
			c.readBytes += e.GetValue()
		case strings.EqualFold(e.GetOp(), "write") && bytes:
			c.writeBytes += e.GetValue()
		case strings.EqualFold(e.GetOp(), "read"):
			c.reads += e.GetValue()
		case strings.EqualFold(e.GetOp(), "write"):
			c.writes += e.GetValue()
		}
	}
	for _, e := range b.GetIoServiceBytesRecursive() {
		add(e, true)
	}
	for _, e := range b.GetIoServicedRecursive() {
		add(e, false)
	}
	return out
}

// ioStatCounters takes cgroup v2's io.stat per device.
func ioStatCounters(io *v2.IOStat, dev func(major, minor uint64) string) []ioCounter {
	var out []ioCounter
	for _, e := range io.GetUsage() {
		out = append(out, ioCounter{device: dev(e.GetMajor(), e.GetMinor()),
			readBytes: e.GetRbytes(), writeBytes: e.GetWbytes(), reads: e.GetRios(), writes: e.GetWios()})
	}
	return out
}

func ioMetrics(m *metricSet, cs []ioCounter) {
	for _, c := range cs {
		m.add(mFsReadBytes, c.readBytes, c.device)
		m.add(mFsReads, c.reads, c.device)
		m.add(mFsWriteBytes, c.writeBytes, c.device)
		m.add(mFsWrites, c.writes, c.device)
	}
}

// deviceBytes is one value of container_blkio_device_usage_total: the bytes of one
// operation on one block device.
type deviceBytes struct {
	device       string
	major, minor uint64
	op           string
	bytes        uint64
}

// blkioDeviceBytes takes cgroup v1's recursive service bytes as they are, one value
// per device and operation (Read, Write, Sync, Async, Discard, Total), as cAdvisor.
func blkioDeviceBytes(b *v1.BlkIOStat, dev func(major, minor uint64) string) []deviceBytes {
	var out []deviceBytes
	for _, e := range b.GetIoServiceBytesRecursive() {
		name := e.GetDevice()
		if name == "" {
			name = dev(e.GetMajor(), e.GetMinor())
		}
		out = append(out, deviceBytes{device: name, major: e.GetMajor(), minor: e.GetMinor(), op: e.GetOp(), bytes: e.GetValue()})
	}
	return out
}

// ioStatDeviceBytes takes cgroup v2's io.stat: Read and Write per device, as
// cAdvisor converts it.
func ioStatDeviceBytes(io *v2.IOStat, dev func(major, minor uint64) string) []deviceBytes {
	var out []deviceBytes
	for _, e := range io.GetUsage() {
		name := dev(e.GetMajor(), e.GetMinor())
		out = append(out,
			deviceBytes{device: name, major: e.GetMajor(), minor: e.GetMinor(), op: "Read", bytes: e.GetRbytes()},
			deviceBytes{device: name, major: e.GetMajor(), minor: e.GetMinor(), op: "Write", bytes: e.GetWbytes()})
	}
	return out
}

func deviceMetrics(m *metricSet, ds []deviceBytes) {
	for _, d := range ds {
		m.add(mBlkioDevice, d.bytes, d.device, strconv.FormatUint(d.major, 10), strconv.FormatUint(d.minor, 10), d.op)
	}
}

// pressureMetrics are cAdvisor's PSI counters: "stalled" is full, "waiting" some, in
// whole seconds (the kernel counts microseconds). None where the kernel has no PSI.
func pressureMetrics(m *metricSet, p psiSet) {
	const usec = uint64(time.Second / time.Microsecond)
	for _, r := range []struct {
		psi              *v2.PSIStats
		stalled, waiting metricDesc
	}{
		{p.cpu, mPressureCPUStalled, mPressureCPUWaiting},
		{p.memory, mPressureMemStalled, mPressureMemWaiting},
		{p.io, mPressureIOStalled, mPressureIOWaiting},
	} {
		if full := r.psi.GetFull(); full != nil {
			m.add(r.stalled, full.GetTotal()/usec)
		}
		if some := r.psi.GetSome(); some != nil {
			m.add(r.waiting, some.GetTotal()/usec)
		}
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
