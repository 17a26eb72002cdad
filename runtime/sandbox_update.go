package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdatePodSandboxResources records the pod-level resources the kubelet has set on
// the pod's cgroup (in-place pod resize); PodSandboxStatus reports them in its
// verbose info.
func (s *Service) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	for name, r := range map[string]*runtimeapi.LinuxContainerResources{"overhead": req.GetOverhead(), "resources": req.GetResources()} {
		if err := validateResourceValues(name, r); err != nil {
			return nil, err
		}
	}
	if err := s.opts.Containers.NRI().UpdatePod(ctx, req.GetPodSandboxId(), req.GetOverhead(), req.GetResources()); err != nil {
		return nil, err
	}
	if err := s.opts.Sandboxes.UpdateResources(ctx, req.GetPodSandboxId(), req.GetOverhead(), req.GetResources()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
