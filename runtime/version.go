package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeName is what Version reports as the runtime's name.
const RuntimeName = "shimd"

// Version returns shimd's name and version and the CRI API version.
func (s *Service) Version(_ context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       RuntimeName,
		RuntimeVersion:    s.opts.Version,
		RuntimeApiVersion: "v1",
	}, nil
}
