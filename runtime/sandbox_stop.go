package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox kills the pod's containers and stops the pod; an unknown id succeeds.
func (s *Service) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Pod(req.GetPodSandboxId())
	known := err == nil
	if known {
		if err := s.opts.Containers.StopPod(ctx, sb.ID); err != nil {
			return nil, err
		}
	}
	if err := s.opts.Sandboxes.Stop(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if known {
		s.opts.Containers.Events().Emit(sb.ID, sb.ID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		s.opts.Containers.NRI().PodStopped(ctx, sb)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}
