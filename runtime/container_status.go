package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus reports one container.
func (s *Service) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	return s.opts.Containers.Status(ctx, req)
}
