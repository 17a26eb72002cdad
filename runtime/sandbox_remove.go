package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox removes the pod's containers and the pod, stopping it first; an
// unknown id succeeds.
func (s *Service) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Pod(req.GetPodSandboxId())
	known := err == nil
	if known {
		if err := s.opts.Containers.RemovePod(ctx, sb); err != nil {
			return nil, err
		}
	}
	if err := s.opts.Sandboxes.Remove(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if known {
		s.opts.Containers.Events().EmitWith(sb.ID, sb.ID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, sb.CRIStatus())
		s.opts.Containers.NRI().PodRemoved(ctx, sb)
		s.opts.Stats.Forget(sb.ID)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
