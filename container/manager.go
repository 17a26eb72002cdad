// Package container is shimd's container manager: it creates, starts, stops and
// removes the containers of pods (one containerd container each, with a task in the
// pod's shim), copies their output to the CRI log, records their exits, serves exec,
// attach and ExecSync, and rebuilds its store after a restart (recover.go). It mirrors
// package sandbox's Manager; all it knows of a pod are the facts of package pod.
package container

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/seclabel"
)

// Pods finds the pods containers run in: *sandbox.Manager.
type Pods interface {
	// Pod returns a pod's facts by id or unique id prefix (NotFound if none).
	Pod(id string) (pod.Pod, error)
	// Pods returns the facts of every pod, oldest first.
	Pods() []pod.Pod
	// PausePID returns the pid of a READY pod's pause process, read from containerd
	// now when recovery could not tell it (its shim did not answer in time); 0 when
	// it is still not known, or none runs.
	PausePID(ctx context.Context, id string) uint32
	// PodShimSocket finds the socket of a pause-less pod's shim.
	PodShimSocket(id string) (string, error)
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

// Images is what containers need from the image service.
type Images interface {
	Find(ctx context.Context, ref string) (*image.Image, error)
	// SnapshotterRoot is where a snapshotter keeps its data (the writable layers' fs).
	SnapshotterRoot(ctx context.Context, snapshotter string) (string, error)
}

// Options configures a Manager.
type Options struct {
	Client *client.Client
	Pods   Pods
	// Handlers are the runtime handlers pods run on.
	Handlers pod.Handlers
	Images   Images
	// RootDir keeps container status files; StateDir the stdio FIFOs.
	RootDir  string
	StateDir string
	// MinOOMScoreAdj is shimd's own oom_score_adj; no container gets less.
	MinOOMScoreAdj int
	// NRI relays to NRI plugins; nil: NRI is off (config key nri.enabled).
	NRI NRIPlugins
	// Labels gives containers their SELinux labels and relabels their volumes
	// (selinux.go); nil: none (no SELinux).
	Labels *seclabel.Labeler
	// CDI resolves CDI devices; nil: CDI is off (config key cdi.enabled).
	CDI CDIRegistry
	// Namespace is shimd's containerd namespace.
	Namespace string
	// Node is what shimd learned about the node at start.
	Node NodeInfo
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// CleanupTimeout bounds the work detached from a request (create, start and
	// remove of a container). Zero: 2 minutes.
	CleanupTimeout time.Duration
	// ContainerFsDir, when set, holds the containers' writable layers (a split image
	// filesystem, writable.go); "": they are the snapshotter's, beside the images.
	ContainerFsDir string
	// Cleanups retries the cleanups that failed (package cleanup); nil: none is
	// retried (it stays until the next restart's recovery).
	Cleanups *cleanup.Queue
	// RejectAbsentMountSources refuses a bind mount whose host path is missing
	// (NotFound) instead of creating it as a directory (config key
	// reject_absent_mount_sources; create_checks.go).
	RejectAbsentMountSources bool
	// DeviceOwnershipFromSecurityContext gives a container's devices its run_as_user
	// and run_as_group (config key device_ownership_from_security_context).
	DeviceOwnershipFromSecurityContext bool
}

// SELinuxNode is the node's SELinux as shimd uses it (Status's "selinux" entry).
type SELinuxNode struct {
	// Configured: enable_selinux is set; Kernel: the kernel has SELinux on.
	// Pods and containers get labels when both hold.
	Configured, Kernel bool
	// Enforcing: the kernel enforces the policy (else it only logs denials).
	Enforcing bool
	// ProcessLabel and FileLabel are the policy's default container process and
	// file labels (its contexts/lxc_contexts), "" when it has none.
	ProcessLabel, FileLabel string
}

// Labels tells whether pods and containers get SELinux labels.
func (n SELinuxNode) Labels() bool { return n.Configured && n.Kernel }

// NodeInfo describes the node, read once at start (see cmd/shimd).
type NodeInfo struct {
	// Capabilities is the bounding set shimd can hand out (privileged, "ALL").
	Capabilities []string
	// UnifiedCgroups: the host runs cgroup v2 only.
	UnifiedCgroups bool
	// HugetlbController: the hugetlb cgroup controller exists.
	HugetlbController bool
	// AppArmor: the kernel enforces AppArmor, so a container may run under a
	// Localhost profile loaded on the node.
	AppArmor bool
	// AppArmorDefault is shimd's default AppArmor profile, loaded at start (see
	// apparmor.go), for containers that ask RuntimeDefault or nothing and are not
	// privileged; "" = none, they run unconfined (no AppArmor, or no apparmor_parser).
	AppArmorDefault string
	// SELinux is what shimd does with SELinux (enable_selinux, cmd/shimd/selinux.go).
	SELinux SELinuxNode
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
	// MountOptions are the mount options the OCI runtime knows; nil when it did not
	// say (then only the plain forms of a mount's mount_options are passed).
	MountOptions []string
}

// Manager runs containers. It is safe for concurrent use.
type Manager struct {
	opts       Options
	ctrd       containerdAPI // opts.Client
	containers *containerStore
	events     *Events // GetContainerEvents subscribers
	exits      *Exits
	keeper     *exitKeeper // the containers' records in the sandbox store
	gates      *podGates   // pause-less pods' task creates and deletes (shim_gate.go)
	deleter    *deleter
	layers     *writableLayers
	dirs       dirs
	volumes    *imageVolumes
	cdi        cdiInjector
	confine    *confinement // AppArmor and SELinux (apparmor.go, selinux.go)
	nri        *NRIGlue
	finishing  sync.WaitGroup // exits being recorded (TaskExit); Close waits
	closing    chan struct{}  // closed by Close: ends the waits for lost exits
	userDBs    userDBCache    // images' /etc/passwd and /etc/group, by chain id
	ckpt       *Checkpoints
	treesOK    treeCache // paths of requests found sound in images, by chain id
}

// New makes the container manager; call Recover before serving.
func New(opts Options) *Manager { return newManager(opts, opts.Client) }

// newManager is New on api, the client every part of the manager uses (a fake in
// the unit tests).
func newManager(opts Options, api containerdAPI) *Manager {
	if opts.Node.CPUs == "" {
		opts.Node.CPUs = readOnlineSet("/sys/devices/system/cpu/online", "0")
	}
	if opts.Node.MemoryNodes == "" {
		opts.Node.MemoryNodes = readOnlineSet("/sys/devices/system/node/online", "0")
	}
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 2 * time.Minute
	}
	s := &Manager{opts: opts, ctrd: api, containers: newContainerStore(), closing: make(chan struct{})}
	s.gates = &podGates{pods: opts.Pods}
	s.layers = &writableLayers{ctrd: s.ctrd, fsDir: opts.ContainerFsDir, containers: s.containers, cleanupTimeout: opts.CleanupTimeout}
	s.nri = &NRIGlue{m: s, plugins: opts.NRI}
	s.events = &Events{m: s}
	s.exits = &Exits{m: s}
	s.keeper = &exitKeeper{store: ctrd.NewSandboxStore(opts.Client)}
	s.dirs = dirs{root: opts.RootDir, state: opts.StateDir}
	s.deleter = &deleter{ctrd: api, gates: s.gates, keeper: s.keeper, pods: opts.Pods, dirs: s.dirs,
		cleanups: opts.Cleanups, cleanupTimeout: opts.CleanupTimeout, cgroupDriver: opts.CgroupDriver, namespace: opts.Namespace}
	s.ckpt = &Checkpoints{m: s, criu: newCRIUChecker()}
	s.volumes = &imageVolumes{m: s}
	s.cdi = cdiInjector{registry: opts.CDI}
	if s.opts.Labels == nil {
		s.opts.Labels = seclabel.Disabled()
	}
	s.confine = &confinement{node: s.opts.Node, apparmor: newAppArmorDefault(), labels: s.opts.Labels}
	return s
}

// Node is what the manager knows of the node (CPUs and memory nodes filled in).
func (s *Manager) Node() NodeInfo { return s.opts.Node }

// Events publishes container and pod lifecycle events (events.go).
func (s *Manager) Events() *Events { return s.events }

// Checkpoints checkpoints containers and pods with CRIU and restores them
// (checkpoint.go, restore.go, pod_checkpoint.go).
func (s *Manager) Checkpoints() *Checkpoints { return s.ckpt }

// Exits records the exits and OOM kills the event monitor sees (exit.go).
func (s *Manager) Exits() *Exits { return s.exits }

// Close is for shutdown, after the server and the event monitor stopped: it waits for
// the exits being recorded (not for lost ones, see lostExitWait) and stops copying the
// output of running containers. Their FIFOs stay, and the next shimd reattaches to
// them (Recover), as after a crash.
func (s *Manager) Close() {
	close(s.closing)
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
func (s *Manager) detachedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return detached(ctx, s.opts.CleanupTimeout)
}

// detached is ctx without its cancellation (its values kept), bounded by timeout.
func detached(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// readOnlineSet reads a sysfs list of online CPUs or memory nodes; def when the file
// is missing (a kernel without NUMA has no node directory: node 0 only).
func readOnlineSet(path, def string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	return strings.TrimSpace(string(data))
}
