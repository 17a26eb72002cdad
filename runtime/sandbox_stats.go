package runtime

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// PodSandboxStats reports a pod's CPU, memory, network and its containers' stats.
func (s *Service) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	p, err := s.opts.Sandboxes.Pod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: s.opts.Stats.PodStats(ctx, p)}, nil
}

// ListPodSandboxStats reports the stats of the pods matching the filter.
func (s *Service) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	var pods []pod.Pod
	for _, p := range s.opts.Sandboxes.Pods() {
		if f.GetId() != "" && !strings.HasPrefix(p.ID, f.GetId()) || !pod.LabelsMatch(p.Config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		pods = append(pods, p)
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: s.opts.Stats.ListPodStats(ctx, pods)}, nil
}
