package runtime

import (
	"context"

	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox kills the pod's containers and stops the pod; an unknown id succeeds.
func (s *Service) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Get(req.GetPodSandboxId())
	if err == nil {
		if err := s.stopPodContainers(ctx, sb.ID); err != nil {
			return nil, err
		}
	}
	if err := s.opts.Sandboxes.Stop(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if sb != nil {
		s.emit(sb.ID, sb.ID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
	if sb != nil && s.nriOn() && s.nriStopOnce(sb.ID) {
		if err := s.nriPodEvent(ctx, api.Event_STOP_POD_SANDBOX, sb); err != nil {
			log.G(ctx).WithError(err).Warn("NRI")
		}
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}
