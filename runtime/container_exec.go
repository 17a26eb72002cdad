package runtime

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec returns the URL of an exec session in a running container; the session
// starts when the client connects to it (streaming.go).
func (s *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(req.GetCmd()) == 0 && req.GetContainerId() != "" {
		return nil, invalid("cmd", "is required")
	}
	id, srv, err := s.streamTarget(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.ExecRequest)
	r.ContainerId = id // a prefix resolves now, not when the client connects
	return srv.GetExec(ctx, r)
}
