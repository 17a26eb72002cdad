package runtime

import (
	"context"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/sandbox"
)

// PodSandboxStats reports a pod: CPU and memory of the pause process and its
// containers added up, network counters of the pod's interfaces, and per-container stats.
func (s *Service) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: s.sandboxStats(ctx, sb)}, nil
}

// ListPodSandboxStats reports the pods matching the filter.
func (s *Service) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	for _, sb := range s.opts.Sandboxes.List() {
		if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) || !labelsMatch(sb.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Stats = append(resp.Stats, s.sandboxStats(ctx, sb))
	}
	return resp, nil
}

func (s *Service) sandboxStats(ctx context.Context, sb *sandbox.Sandbox) *runtimeapi.PodSandboxStats {
	now := time.Now()
	linux := &runtimeapi.LinuxPodSandboxStats{}
	total := cgroupSample{at: now}
	if smp, err := s.taskSample(ctx, sb.ID); err == nil {
		addSample(&total, smp)
	}
	for _, c := range s.containers.inSandbox(sb.ID) {
		cs := s.containerStats(ctx, c)
		linux.Containers = append(linux.Containers, cs)
		if c.Status().State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if smp, err := s.taskSample(ctx, c.ID); err == nil {
				addSample(&total, smp)
			}
		}
	}
	linux.Cpu, linux.Memory = s.cpuMem("pod:"+sb.ID, total)
	linux.Process = &runtimeapi.ProcessUsage{Timestamp: now.UnixNano()}
	if sb.NetNSPath != "" && sb.State() == sandbox.StateReady {
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
