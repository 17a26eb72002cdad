package runtime

import (
	"context"
	"sync"

	"github.com/containerd/containerd/v2/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/sandbox"
)

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

// Images is what containers need from the image service.
type Images interface {
	Find(ctx context.Context, ref string) (*image.Image, error)
	// SnapshotterRoot is where a snapshotter keeps its data (the writable layers' fs).
	SnapshotterRoot(ctx context.Context, snapshotter string) (string, error)
}

// Options configures the RuntimeService.
type Options struct {
	Client    *client.Client
	Sandboxes *sandbox.Manager
	Network   Network
	Images    Images
	// RootDir keeps container status files; StateDir the stdio FIFOs.
	RootDir  string
	StateDir string
	// MinOOMScoreAdj is shimd's own oom_score_adj; no container gets less.
	MinOOMScoreAdj int
	// NRI relays to NRI plugins; nil: NRI is off (config key nri.enabled).
	NRI NRIPlugins
	// CDI resolves CDI devices; nil: CDI is off (config key cdi.enabled).
	CDI CDIRegistry
	// Namespace is shimd's containerd namespace.
	Namespace string
	// Node is what shimd learned about the node at start.
	Node NodeInfo
	// Version is shimd's version; ConfigJSON the effective config (keys as in the
	// TOML file), for verbose Status.
	Version    string
	ConfigJSON string
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// Handlers are the configured runtime handler names; DefaultHandler is the one for "".
	Handlers       []string
	DefaultHandler string
}

// NodeInfo describes the node, read once at start (see cmd/shimd).
type NodeInfo struct {
	// Capabilities is the bounding set shimd can hand out (privileged, "ALL").
	Capabilities []string
	// UnifiedCgroups: the host runs cgroup v2 only.
	UnifiedCgroups bool
	// HugetlbController: the hugetlb cgroup controller exists.
	HugetlbController bool
	// CPUs and MemoryNodes are the node's online CPUs and memory nodes as cpuset
	// lists ("0-3"); New reads them from sysfs when empty.
	CPUs, MemoryNodes string
	// Handlers holds what each runtime handler's OCI runtime supports.
	Handlers map[string]HandlerFeatures
}

// HandlerFeatures are the optional features of one runtime handler.
type HandlerFeatures struct {
	RecursiveReadOnlyMounts bool
	UserNamespaces          bool
}

// Service implements the CRI RuntimeService. Handlers validate, delegate and convert;
// errors are classified with errdefs and mapped to gRPC codes by the server's
// interceptor.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	opts       Options
	containers *containerStore
	rates      cpuRates
	streaming  StreamingServer // set once by SetStreaming before serving
	events     eventHub        // GetContainerEvents subscribers
	volumeMu   sync.Mutex      // held while an image volume is mounted
	nriStopped sync.Map        // pod ids whose stop NRI plugins were told of
}

// New makes the RuntimeService; call Recover before serving.
func New(opts Options) *Service {
	if opts.Node.CPUs == "" {
		opts.Node.CPUs = readOnlineSet("/sys/devices/system/cpu/online", "0")
	}
	if opts.Node.MemoryNodes == "" {
		opts.Node.MemoryNodes = readOnlineSet("/sys/devices/system/node/online", "0")
	}
	s := &Service{opts: opts, containers: newContainerStore()}
	opts.Sandboxes.OnExit(s.handleExit)
	opts.Sandboxes.OnOOM(s.handleOOM)
	opts.Sandboxes.OnResync(s.resyncContainers)
	return s
}

var _ runtimeapi.RuntimeServiceServer = (*Service)(nil)

// containerdServing tells whether containerd answers.
func (s *Service) containerdServing(ctx context.Context) (bool, error) {
	return s.opts.Client.IsServing(ctx)
}
