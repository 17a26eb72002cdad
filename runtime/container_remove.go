package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveContainer removes a container, stopping it first; an unknown id succeeds.
func (s *Service) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	resp, err := s.opts.Containers.Remove(ctx, req)
	if err == nil {
		s.opts.Stats.Forget(req.GetContainerId())
	}
	return resp, err
}
