package runtime

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/stats"
)

// ContainerStats reports one container's CPU, memory and writable layer usage.
func (s *Service) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	c, err := s.opts.Containers.StatsFor(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: s.opts.Stats.ContainerStats(ctx, c)}, nil
}

// ListContainerStats reports the stats of containers matching the filter.
func (s *Service) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	var cs []stats.Container
	for _, c := range s.opts.Containers.StatsOf("") {
		if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) ||
			f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) ||
			!pod.LabelsMatch(c.Labels, f.GetLabelSelector()) {
			continue
		}
		cs = append(cs, c)
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: s.opts.Stats.ListContainerStats(ctx, cs)}, nil
}
