package stats

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// PodStats samples a pod: its own task, its containers and its network.
func (s *Collector) PodStats(ctx context.Context, sb pod.Pod) *runtimeapi.PodSandboxStats {
	now := time.Now()
	linux := &runtimeapi.LinuxPodSandboxStats{}
	total := cgroupSample{at: now}
	if smp, err := taskSample(ctx, s.opts.Client, sb.ID); err == nil {
		addSample(&total, smp)
	}
	for _, c := range s.opts.Containers.StatsOf(sb.ID) {
		cs := s.ContainerStats(ctx, c)
		linux.Containers = append(linux.Containers, cs)
		if c.Running {
			if smp, err := taskSample(ctx, s.opts.Client, c.ID); err == nil {
				addSample(&total, smp)
			}
		}
	}
	linux.Cpu, linux.Memory = s.cpuMem("pod:"+sb.ID, total)
	linux.Process = &runtimeapi.ProcessUsage{Timestamp: now.UnixNano()}
	if sb.NetNSPath != "" && sb.State == pod.Ready {
		if ifaces, err := network.Interfaces(sb.NetNSPath); err == nil {
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

func addSample(total *cgroupSample, s cgroupSample) {
	total.cpuNanos += s.cpuNanos
	total.memUsage += s.memUsage
	total.memWS += s.memWS
	total.memRSS += s.memRSS
	total.pageFaults += s.pageFaults
	total.majorPageFaults += s.majorPageFaults
}
