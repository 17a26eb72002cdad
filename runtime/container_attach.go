package runtime

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Attach returns the URL of a session attached to a running container's IO.
func (s *Service) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	id, srv, err := s.streamTarget(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.AttachRequest)
	r.ContainerId = id
	return srv.GetAttach(ctx, r)
}
