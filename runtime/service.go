package runtime

import (
	"context"

	"github.com/containerd/containerd/v2/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/sandbox"
)

// Network is what the runtime service asks of pod networking directly.
type Network interface {
	Ready() error
	SetPodCIDR(cidr string)
}

// Options configures the RuntimeService.
type Options struct {
	Client    *client.Client
	Sandboxes *sandbox.Manager
	Network   Network
	// Version is shimd's version; ConfigJSON the effective config, for verbose Status.
	Version    string
	ConfigJSON string
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// Handlers are the configured runtime handler names; DefaultHandler is the one for "".
	Handlers       []string
	DefaultHandler string
}

// Service implements the CRI RuntimeService. Handlers validate, delegate and convert;
// errors are classified with errdefs and mapped to gRPC codes by the server's
// interceptor.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	opts Options
}

// New makes the RuntimeService.
func New(opts Options) *Service { return &Service{opts: opts} }

var _ runtimeapi.RuntimeServiceServer = (*Service)(nil)

// containerdServing tells whether containerd answers.
func (s *Service) containerdServing(ctx context.Context) (bool, error) {
	return s.opts.Client.IsServing(ctx)
}
