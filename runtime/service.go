package runtime

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/stats"
)

// PodSandboxes runs pod sandboxes and tells their facts: *sandbox.Manager. Exits of
// pause processes reach the sandboxes through the event monitor (package taskevents),
// not through this service.
type PodSandboxes interface {
	// Run makes a pod and calls announce (NRI's RunPodSandbox) while it is READY
	// but not yet listed; announce's error refuses the pod (sandbox.Manager.Run).
	Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string,
		announce func(ctx context.Context, p pod.Pod) (done func(), err error)) (id string, err error)
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	UpdateResources(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error
	container.Pods
}

// Network is what the runtime service asks of pod networking directly.
type Network interface {
	Ready() error
	// ConfigWarning describes a network config that failed to load while an older
	// one stays in use ("" if none).
	ConfigWarning() string
	// Describe is the network in use as JSON, for verbose Status.
	Describe() string
	SetPodCIDR(cidr string)
}

// Containerd tells whether containerd answers: *client.Client.
type Containerd interface {
	IsServing(ctx context.Context) (bool, error)
}

// StreamingServer hands out the URLs of streaming sessions (package streaming's Server).
type StreamingServer interface {
	GetExec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// Options configures the RuntimeService: the managers it delegates to, and what it
// reports.
type Options struct {
	Containerd Containerd
	Sandboxes  PodSandboxes
	Containers *container.Manager
	Stats      *stats.Collector
	Network    Network
	// Handlers are the runtime handlers; Node what shimd learned about the node.
	Handlers pod.Handlers
	Node     container.NodeInfo
	// Version is shimd's version; ConfigJSON the effective config (keys as in the
	// TOML file), for verbose Status.
	Version    string
	ConfigJSON string
	// PauseImage names the image sandboxes run, for verbose PodSandboxStatus.
	PauseImage string
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// EventedPLEGStatus: PodSandboxStatus carries a timestamp and the pod's
	// container statuses (config key evented_pleg_status).
	EventedPLEGStatus bool
	// HandlerNames are the configured runtime handler names, in the order Status
	// reports them.
	HandlerNames []string
	// CleanupTimeout bounds work detached from a request. Zero: 2 minutes.
	CleanupTimeout time.Duration
}

// Service implements the CRI RuntimeService as a façade: each RPC validates its
// request, delegates to the sandbox or container manager or the stats collector, and
// converts. It holds no state of its own. Errors are classified with errdefs and
// mapped to gRPC codes by the server's interceptor.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	opts      Options
	streaming StreamingServer // set once by SetStreaming before serving
}

// New makes the RuntimeService.
func New(opts Options) *Service {
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 2 * time.Minute
	}
	return &Service{opts: opts}
}

var _ runtimeapi.RuntimeServiceServer = (*Service)(nil)

// detachedContext is detached from the request (keeping its values) and bounded by
// the cleanup timeout: work that must not be left half done runs under it.
func (s *Service) detachedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.CleanupTimeout)
}
