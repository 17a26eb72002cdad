package runtime

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/streaming"
)

// Exec, Attach and PortForward (flow 3 in STYLE.md): the RPC validates and returns a
// URL from the streaming server, starting nothing. The client connects to that URL and
// the streaming server calls the backend (StreamingBackend): a containerd exec
// (streaming_exec.go), an attachment to the container's IO (streaming_attach.go), or
// a connection dialled inside the pod's netns (network.DialPod, or runsc for a gVisor pod; network.Forward).

// StreamingServer hands out the URLs of streaming sessions (package streaming's Server).
type StreamingServer interface {
	GetExec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// SetStreaming sets the server whose URLs Exec, Attach and PortForward return. Call it
// once, before serving; the server's backend is StreamingBackend.
func (s *Service) SetStreaming(srv StreamingServer) { s.streaming = srv }

func (s *Service) streamingServer() (StreamingServer, error) {
	if s.streaming == nil {
		return nil, fmt.Errorf("streaming server: %w", errdefs.ErrNotImplemented)
	}
	return s.streaming, nil
}

// streamTarget applies CRI's rules to an exec or attach request and finds its
// running container.
func (s *Service) streamTarget(id string, tty, stdin, stdout, stderr bool) (*Container, StreamingServer, error) {
	if err := validateID("container_id", id); err != nil {
		return nil, nil, err
	}
	if tty && stderr {
		return nil, nil, invalid("stderr", "tty and stderr cannot both be true")
	}
	if !stdin && !stdout && !stderr {
		return nil, nil, invalid("stdin", "one of stdin, stdout and stderr must be set")
	}
	c, err := s.runningContainer(id)
	if err != nil {
		return nil, nil, err
	}
	srv, err := s.streamingServer()
	return c, srv, err
}

// StreamingBackend is what the streaming server runs sessions with.
func (s *Service) StreamingBackend() streaming.Backend { return streamBackend{s} }

type streamBackend struct{ s *Service }
