package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateContainerResources changes a container's resource limits.
func (s *Service) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	if err := validateResources("linux", req.GetLinux(), s.opts.Node); err != nil {
		return nil, err
	}
	return s.opts.Containers.UpdateResources(ctx, req)
}
