package runtime

import (
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/streaming"
)

// Exec, Attach and PortForward (flow 3 in doc.go): the RPC validates and returns a
// URL from the streaming server, starting nothing. The client connects to that URL
// and the streaming server calls the backend: a containerd exec or an attachment to
// the container's IO (container.Streams), or a connection dialled inside the pod's
// netns (sandbox_portforward.go).

// SetStreaming sets the server whose URLs Exec, Attach and PortForward return. Call
// it once, before serving; the server's backend is StreamingBackend.
func (s *Service) SetStreaming(srv StreamingServer) { s.streaming = srv }

// StreamingBackend is what the streaming server runs sessions with.
func (s *Service) StreamingBackend() streaming.Backend {
	return streamBackend{Streams: s.opts.Containers.Streams(), s: s}
}

type streamBackend struct {
	*container.Streams
	s *Service
}

func (s *Service) streamingServer() (StreamingServer, error) {
	if s.streaming == nil {
		return nil, fmt.Errorf("streaming server: %w", errdefs.ErrNotImplemented)
	}
	return s.streaming, nil
}

// streamTarget applies CRI's rules to an exec or attach request and finds its
// running container's full id.
func (s *Service) streamTarget(id string, tty, stdin, stdout, stderr bool) (string, StreamingServer, error) {
	if err := validateID("container_id", id); err != nil {
		return "", nil, err
	}
	if tty && stderr {
		return "", nil, invalid("stderr", "tty and stderr cannot both be true")
	}
	if !stdin && !stdout && !stderr {
		return "", nil, invalid("stdin", "one of stdin, stdout and stderr must be set")
	}
	full, err := s.opts.Containers.Running(id)
	if err != nil {
		return "", nil, err
	}
	srv, err := s.streamingServer()
	return full, srv, err
}
