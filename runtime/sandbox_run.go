package runtime

import (
	"context"

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
	// NRI plugins hear of the pod while it is READY but not yet listed; one that
	// refuses it has it undone.
	id, err := s.opts.Sandboxes.Run(ctx, req.GetConfig(), req.GetRuntimeHandler(), s.opts.Containers.NRI().RunPod)
	if err != nil {
		return nil, err
	}
	// Under its own id, as containerd's CRI plugin reports a sandbox.
	s.opts.Containers.Events().Emit(id, id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	s.opts.Containers.Events().Emit(id, id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}
