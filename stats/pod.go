package stats

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// PodStats samples a pod: its cgroup, its containers and its network. CPU and
// memory are the pod cgroup's (podgroup.go), else the sum of the pause task's and
// the running containers' cgroups; the process count is the running containers'
// (pids.current: processes and threads), the pause process left out, as containerd's
// CRI plugin counts; pressure is the pod cgroup's (PSI does not add up).
func (s *Collector) PodStats(ctx context.Context, sb pod.Pod) *runtimeapi.PodSandboxStats {
	return s.podStats(ctx, nil, sb, s.opts.Containers.StatsOf(sb.ID))
}

// podStats is PodStats of the pod's containers cs, with the pass's metrics if any.
// Each running container's sample serves its own stats and, without a pod cgroup,
// the pod's sum.
func (s *Collector) podStats(ctx context.Context, p *metricsPass, sb pod.Pod, cs []Container) *runtimeapi.PodSandboxStats {
	now := time.Now()
	linux := &runtimeapi.LinuxPodSandboxStats{}
	total := cgroupSample{at: now}
	var groups []string
	// The containers first, the pod's cgroup after them: its counters only grow and
	// hold its children's, so the pod's CPU read last is at least what its
	// containers were read at in the same answer. Read first, it fell short of
	// them by what they ran while they were read (a container's sample can wait for
	// its writable layer's usage): 5 ms of 32 s in the cgroup v2 guest.
	var ctrRates uint64 // the running containers' usage_nano_cores
	for _, c := range cs {
		st, smp := s.containerStats(ctx, p, c)
		linux.Containers = append(linux.Containers, st)
		if smp != nil {
			addSample(&total, *smp)
			ctrRates += smp.rate
			groups = append(groups, smp.group)
		}
	}
	podSmp, podErr := s.podCgroupSample(sb)
	// A pause-less pod has no task of its own: asking for one would only fetch every
	// task's metrics from containerd (the pass's one call) to find none.
	if podErr != nil && !sb.Pauseless {
		if smp, err := s.sample(ctx, p, sb.ID, sb.PID, s.opts.Handlers.KernelCgroups(sb.RuntimeHandler)); err == nil {
			pauseTasks := smp.tasks != nil
			smp.tasks = nil // the pause process is not counted
			addSample(&total, smp)
			if pauseTasks && total.tasks == nil {
				zero := uint64(0) // no container runs: 0 processes are known
				total.tasks = &zero
			}
			groups = append(groups, smp.group)
		}
	}
	if podErr == nil {
		if total.tasks == nil && podSmp.tasks != nil {
			*podSmp.tasks = 0 // no container runs: 0 processes are known
		} else {
			podSmp.tasks = total.tasks
		}
		total = podSmp
	} else {
		total.psi = s.podPSI(sb, groups...)
	}
	rate, ok := s.rates.rate("pod:"+sb.ID, cpuPoint{at: total.at, nanos: total.cpuNanos}, cpuPoint{})
	if !ok {
		rate = ctrRates // no point a window old yet: the containers' own windows
	}
	linux.Cpu, linux.Memory = cpuMem(total, rate)
	linux.Io = ioUsage(total)
	linux.Process = &runtimeapi.ProcessUsage{Timestamp: now.UnixNano()}
	if total.tasks != nil {
		linux.Process.ProcessCount = &runtimeapi.UInt64Value{Value: *total.tasks}
	}
	if sb.NetNSPath != "" && sb.State == pod.Ready {
		if ifaces, err := podInterfaces(sb, cs); err == nil {
			linux.Network = &runtimeapi.NetworkUsage{Timestamp: now.UnixNano()}
			for i, it := range ifaces {
				u := &runtimeapi.NetworkInterfaceUsage{
					Name:    it.Name,
					RxBytes: &runtimeapi.UInt64Value{Value: it.RxBytes}, RxErrors: &runtimeapi.UInt64Value{Value: it.RxErrors},
					TxBytes: &runtimeapi.UInt64Value{Value: it.TxBytes}, TxErrors: &runtimeapi.UInt64Value{Value: it.TxErrors},
				}
				if i == 0 || it.Name == "eth0" {
					linux.Network.DefaultInterface = u
				}
				linux.Network.Interfaces = append(linux.Network.Interfaces, u)
			}
		}
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id: sb.ID, Metadata: sb.Config.GetMetadata(), Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(),
		},
		Linux: linux,
	}
}

// podInterfaces reads the counters of the pod's interfaces: from its pause process's
// /proc, or, in a pause-less pod, that of a running container found in the pod's
// pinned namespace (neither enters the namespace); else in the pinned namespace (a
// pause-less pod with no container running).
func podInterfaces(sb pod.Pod, cs []Container) ([]network.InterfaceStats, error) {
	if sb.PID != 0 && !sb.Pauseless {
		if ifaces, err := network.InterfacesOf(sb.PID); err == nil {
			return ifaces, nil
		}
	}
	if sb.Pauseless {
		for _, c := range cs {
			if !c.Running || c.Pid == 0 {
				continue
			}
			if ifaces, err := network.InterfacesIn(c.Pid, sb.NetNSPath); err == nil {
				return ifaces, nil
			}
		}
	}
	return network.Interfaces(sb.NetNSPath)
}

// podPSI reads the pressure of the pod's cgroup, found as the parent of the first of
// its tasks' own groups that lies under the pod's cgroup parent.
func (s *Collector) podPSI(sb pod.Pod, taskGroups ...string) psiSet {
	parent := sb.Config.GetLinux().GetCgroupParent()
	for _, g := range taskGroups {
		if dir := podGroup(g, parent); dir != "" {
			return readPSI(dir)
		}
	}
	return psiSet{}
}

func addSample(total *cgroupSample, s cgroupSample) {
	total.cpuNanos += s.cpuNanos
	total.memUsage += s.memUsage
	total.memWS += s.memWS
	total.memRSS += s.memRSS
	total.pageFaults += s.pageFaults
	total.majorPageFaults += s.majorPageFaults
	if s.tasks != nil {
		n := *s.tasks
		if total.tasks != nil {
			n += *total.tasks
		}
		total.tasks = &n
	}
}
