package container

// Exec and Attach (flow 3 in runtime/doc.go): the RPC returns a URL from the
// streaming server, starting nothing. The client connects to that URL and the
// streaming server calls the backend: a containerd exec (streaming_exec.go) or an
// attachment to the container's IO (streaming_attach.go).

// Running returns the full id of a running container, found by id or unique prefix:
// exec and attach sessions are made for it.
func (s *Manager) Running(id string) (string, error) {
	c, err := s.containers.running(id)
	if err != nil {
		return "", err
	}
	return c.ID, nil
}

// Streams runs exec and attach sessions for the streaming server.
func (s *Manager) Streams() *Streams { return &Streams{s} }

// Streams runs the exec and attach sessions of the streaming server
// (streaming_exec.go, streaming_attach.go).
type Streams struct{ s *Manager }
