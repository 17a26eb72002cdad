// Package stats answers the CRI's stats and metrics calls: cgroup samples of pods'
// and containers' tasks (a runc task's cgroup files read directly, direct.go; other
// runtimes' through containerd), writable-layer usage (through the snapshotter, kept
// up to about 10 s) and network counters (the pause process's /proc, else read in the
// pod's network namespace), converted to CRI ContainerStats, PodSandboxStats and
// cAdvisor-named metrics, with the pressure (PSI) it reads from the cgroup2 hierarchy
// where containerd's metrics lack it (cgroupfs.go). A pod's CPU and memory are its
// cgroup's (podgroup.go). It keeps a few CPU samples per container and pod, to give
// usage_nano_cores over at least a second (rate.go).
package stats

import (
	"context"

	"github.com/containerd/containerd/v2/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// Container is what stats needs of one container, read when the call came.
type Container struct {
	ID, SandboxID string
	Metadata      *runtimeapi.ContainerMetadata
	Labels        map[string]string
	Annotations   map[string]string
	ImageName     string
	Snapshotter   string
	// WritableUpper is the directory of the container's writes when its writable
	// layer is not a snapshot (a split image filesystem), on the filesystem of
	// WritableFs; both "" otherwise.
	WritableUpper, WritableFs string
	Running                   bool
	// Pid is the task's process while it runs (0 otherwise).
	Pid uint32
	// KernelCgroups: the container's runtime puts it in cgroups of the host kernel
	// (runc), which stats may read directly.
	KernelCgroups bool
	// StartedAt is in Unix nanoseconds; Resources the current limits.
	StartedAt int64
	Resources *runtimeapi.LinuxContainerResources
}

// Containers lists containers for stats: *container.Manager.
type Containers interface {
	// StatsOf lists the containers of a pod ("" for all).
	StatsOf(podID string) []Container
}

// Images tells where a snapshotter keeps its data (the writable layers' fs).
type Images interface {
	SnapshotterRoot(ctx context.Context, snapshotter string) (string, error)
}

// Options configures a Collector.
type Options struct {
	Client     *client.Client
	Containers Containers
	Images     Images
	// Handlers are the runtime handlers: a pod's tells whether its cgroups are the
	// host kernel's.
	Handlers pod.Handlers
	// CgroupDriver is shimd's ("cgroupfs" or "systemd"): how a pod's cgroup parent
	// names its cgroup (podgroup.go).
	CgroupDriver string
}

// Collector samples pods and containers. It is safe for concurrent use.
type Collector struct {
	opts  Options
	host  hostFS
	rates cpuRates
	usage layerUsage // writable layers' usage, up to layerUsageTTL old
	// groups are the tasks' cgroup directories, for direct reads (direct.go).
	groups groupCache
}

// New makes a Collector.
func New(opts Options) *Collector { return &Collector{opts: opts, host: detectHost()} }

// Forget drops what the collector keeps of a removed container or pod.
func (s *Collector) Forget(id string) {
	s.rates.forget(id)
	s.rates.forget("pod:" + id)
	s.usage.forget(id)
	s.groups.forget(id)
}
