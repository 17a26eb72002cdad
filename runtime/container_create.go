package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CreateContainer creates a container in a READY pod (container.Manager.Create).
func (s *Service) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if err := validateContainerConfig(req.GetConfig(), s.opts.Node); err != nil {
		return nil, err
	}
	return s.opts.Containers.Create(ctx, req)
}
