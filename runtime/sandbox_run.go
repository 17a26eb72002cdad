package runtime

import (
	"context"

	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RunPodSandbox creates and starts a pod sandbox.
func (s *Service) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if err := validateSandboxConfig(req.GetConfig()); err != nil {
		return nil, err
	}
	if err := validateCgroupParent(req.GetConfig().GetLinux().GetCgroupParent(), s.opts.CgroupDriver); err != nil {
		return nil, err
	}
	id, err := s.opts.Sandboxes.Run(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	if err := s.opts.Containers.NRI().RunPod(ctx, id); err != nil {
		// A plugin refused the pod: undo it, detached from the request.
		cctx, cancel := s.detachedContext(ctx)
		defer cancel()
		if uerr := s.opts.Sandboxes.Stop(cctx, id); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("sandbox", id).Warn("undo pod refused by NRI: stop")
		} else if uerr := s.opts.Sandboxes.Remove(cctx, id); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("sandbox", id).Warn("undo pod refused by NRI: remove")
		}
		return nil, err
	}
	// Under its own id, as containerd's CRI plugin reports a sandbox.
	s.opts.Containers.Events().Emit(id, id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	s.opts.Containers.Events().Emit(id, id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}
