package runtime

import (
	"context"

	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox removes the pod's containers and the pod, stopping it first; an
// unknown id succeeds.
func (s *Service) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Get(req.GetPodSandboxId())
	if err == nil {
		if err := s.removePodContainers(ctx, sb.ID); err != nil {
			return nil, err
		}
		rt, err := s.opts.Sandboxes.Runtime(sb.RuntimeHandler)
		if err != nil {
			return nil, err
		}
		if err := s.removeImageVolumes(ctx, sb.ID, rt.Snapshotter); err != nil {
			return nil, err
		}
	}
	if err := s.opts.Sandboxes.Remove(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if sb != nil {
		s.emitWith(sb.ID, sb.ID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, toSandboxStatus(sb))
		s.nriStopped.Delete(sb.ID)
		if err := s.nriPodEvent(ctx, api.Event_REMOVE_POD_SANDBOX, sb); err != nil {
			log.G(ctx).WithError(err).Warn("NRI")
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
