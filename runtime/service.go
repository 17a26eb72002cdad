package runtime

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/sandbox"
)

// PodSandboxes runs pod sandboxes and finds them: all that the runtime service asks
// of package sandbox (*sandbox.Manager). Exits of pause processes reach the sandboxes
// through the event monitor (package taskevents), not through this service.
type PodSandboxes interface {
	Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (id string, err error)
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	UpdateResources(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error
	// Get finds a sandbox by id or unique id prefix (NotFound if none); List
	// returns every sandbox, oldest first.
	Get(id string) (*sandbox.Sandbox, error)
	List() []*sandbox.Sandbox
	// Runtime resolves a runtime handler name ("" is the default).
	Runtime(handler string) (sandbox.Runtime, error)
	// Files are the paths of the pod's files its containers mount.
	Files(sb *sandbox.Sandbox) sandbox.Files
}

// containerdAPI is the part of the containerd client that creating, starting and
// deleting a container use: *client.Client, or a fake in the unit tests.
type containerdAPI interface {
	WithLease(ctx context.Context, opts ...leases.Opt) (context.Context, func(context.Context) error, error)
	SnapshotService(snapshotter string) snapshots.Snapshotter
	GetImage(ctx context.Context, ref string) (client.Image, error)
	LoadContainer(ctx context.Context, id string) (client.Container, error)
	TaskService() tasks.TasksClient
	ContainerService() containers.Store
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

// Images is what containers need from the image service.
type Images interface {
	Find(ctx context.Context, ref string) (*image.Image, error)
	// SnapshotterRoot is where a snapshotter keeps its data (the writable layers' fs).
	SnapshotterRoot(ctx context.Context, snapshotter string) (string, error)
}

// Options configures the RuntimeService.
type Options struct {
	Client    *client.Client
	Sandboxes PodSandboxes
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
	// PauseImage names the image sandboxes run, for verbose PodSandboxStatus.
	PauseImage string
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// Handlers are the configured runtime handler names; DefaultHandler is the one for "".
	Handlers       []string
	DefaultHandler string
	// CleanupTimeout bounds the work detached from a request (create, start and
	// remove of a container). Zero: 2 minutes.
	CleanupTimeout time.Duration
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
	ctrd       containerdAPI // opts.Client
	containers *containerStore
	rates      cpuRates
	streaming  StreamingServer // set once by SetStreaming before serving
	events     eventHub        // GetContainerEvents subscribers
	volumeMu   sync.Mutex      // held while an image volume is mounted
	nriStopped sync.Map        // pod ids whose stop NRI plugins were told of
	finishing  sync.WaitGroup  // exits being recorded (TaskExit); Close waits
	creating   sync.Map        // ids of containers whose CreateContainer is in progress
	userDBs    userDBCache     // images' /etc/passwd and /etc/group, by chain id
	// unknownBefore are the containerd containers the last SweepOrphans found
	// unknown (only SweepOrphans, one at a time, uses it).
	unknownBefore map[string]bool
}

// New makes the RuntimeService; call Recover before serving.
func New(opts Options) *Service {
	if opts.Node.CPUs == "" {
		opts.Node.CPUs = readOnlineSet("/sys/devices/system/cpu/online", "0")
	}
	if opts.Node.MemoryNodes == "" {
		opts.Node.MemoryNodes = readOnlineSet("/sys/devices/system/node/online", "0")
	}
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 2 * time.Minute
	}
	return &Service{opts: opts, ctrd: opts.Client, containers: newContainerStore()}
}

var _ runtimeapi.RuntimeServiceServer = (*Service)(nil)

// containerdServing tells whether containerd answers.
func (s *Service) containerdServing(ctx context.Context) (bool, error) {
	return s.opts.Client.IsServing(ctx)
}

// Close is for shutdown, after the server and the event monitor stopped: it waits for
// the exits being recorded and stops copying the output of running containers. Their
// FIFOs stay, and the next shimd reattaches to them (Recover), as after a crash.
func (s *Service) Close() {
	s.finishing.Wait()
	var copying []*containerIO
	for _, c := range s.containers.list() {
		if cio := c.IO(); cio != nil {
			cio.detach()
			copying = append(copying, cio)
		}
	}
	timeout := time.After(ioDrainTimeout)
	for _, cio := range copying {
		select {
		case <-cio.done:
		case <-timeout:
			return
		}
	}
}

// detachedContext is detached from the request (keeping its values) and bounded by
// the cleanup timeout: work that must not be left half done runs under it.
func (s *Service) detachedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.CleanupTimeout)
}

// snapshotters lists the runtime handlers' snapshotters, each once, sorted.
func (s *Service) snapshotters() []string {
	var out []string
	for _, h := range s.opts.Handlers {
		if rt, err := s.opts.Sandboxes.Runtime(h); err == nil && !slices.Contains(out, rt.Snapshotter) {
			out = append(out, rt.Snapshotter)
		}
	}
	slices.Sort(out)
	return out
}
