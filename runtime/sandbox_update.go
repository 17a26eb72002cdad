package runtime

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
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
	if s.nriOn() {
		sb, err := s.opts.Sandboxes.Get(req.GetPodSandboxId())
		if err != nil {
			return nil, err
		}
		if err := s.opts.NRI.UpdatePodSandbox(ctx, s.nriPod(sb), s.nriResources(req.GetOverhead()), s.nriResources(req.GetResources())); err != nil {
			return nil, fmt.Errorf("NRI plugins refused the update of pod %s: %v: %w", sb.ID, err, errdefs.ErrFailedPrecondition)
		}
	}
	if err := s.opts.Sandboxes.UpdateResources(ctx, req.GetPodSandboxId(), req.GetOverhead(), req.GetResources()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
