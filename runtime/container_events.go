package runtime

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GetContainerEvents streams container and pod lifecycle events (evented PLEG).
func (s *Service) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	return s.opts.Containers.Events().Stream(req, stream)
}
