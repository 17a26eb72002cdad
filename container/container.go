package container

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/spec"
)

// Container is one CRI container. Fields outside mu never change after Create.
//
//	CreateContainer ──► CREATED ──StartContainer──► RUNNING ──(exit / Stop)──► EXITED
//	                       │                                                   │
//	                       └───────────────RemoveContainer◄────────────────────┘
//	(a RUNNING container is stopped first by RemoveContainer)
//
// Lock order: Container.updateMu, then containerStore.mu, then Container.mu; the last
// two are never held across a containerd call.
type Container struct {
	ID        string
	Name      string // reserved name: pod sandbox id + container name + attempt
	SandboxID string
	Config    *runtimeapi.ContainerConfig
	// ImageID is the image's config digest; ImageName the reference it was created from.
	ImageID   string
	ImageName string
	// ImageRef is a repo digest of the image when it has one, else ImageID.
	ImageRef  string
	LogPath   string // absolute; "" when the pod has no log directory
	CreatedAt time.Time
	// Snapshotter keeps the writable layer; StopSignal is the config's stop signal
	// (OCI name), else the image's STOPSIGNAL as given, else "" (signal.go).
	Snapshotter string
	StopSignal  string
	User        spec.User // resolved at create, reported in status
	// WritableDir holds the writable layer (upper and work directories) in split
	// mode (writable.go); "" when the snapshotter's layer is writable.
	WritableDir string

	// statusDir holds status.json (Update writes it).
	statusDir string

	// updateMu serializes UpdateContainerResources of the container, across its
	// containerd calls: each update judges its limits against, and merges them into,
	// what the one before it recorded and applied (a swap limit given alone against
	// the memory limit in effect).
	updateMu sync.Mutex

	// mu guards the fields below. Only the methods in this file take it: state
	// changes go through Update (persisted) or the small setters.
	mu     sync.Mutex
	status containerStatus
	// resources are the current limits: the config's, then UpdateContainerResources'.
	resources *runtimeapi.LinuxContainerResources
	io        *containerIO // nil until started or after exit
	// exited is closed (once, by closeOnce) when the container has exited and its
	// status is final.
	exited     chan struct{}
	exitedOnce sync.Once
	// ooms counts the OOM events seen for the container's cgroup (any process of
	// it, exec'd ones too); one or more makes an exit OOMKilled.
	ooms int
	// podOOM is the pod's OOM kill count when the task was created (podOOMKilled).
	podOOM podOOMBase
	// killedByShimd is set when shimd sent the task SIGKILL (a stop), so that its
	// exit status 137 is not taken for the OOM killer's.
	killedByShimd bool
	// rootfs are the mounts of the writable layer, kept from its creation for the
	// task create (rootfsKept); not after a restart of shimd (the snapshotter is
	// asked then).
	rootfs     []mount.Mount
	rootfsKept bool
	// restore is the checkpoint a container is created from, during its
	// CreateContainer only (restore.go).
	restore *checkpointSource
	// checkpointing is set while a checkpoint of the container runs (checkpoint.go).
	checkpointing atomic.Bool
	// startDone is made by beginStart and closed when that StartContainer returns
	// (endStart): an exit seen while the start runs is recorded only after it.
	startDone chan struct{}
	// finishing is set by the first Exits.finish: an exit is told more than once (its
	// TaskExit, then the TaskDelete of shimd's own delete of the task) and recorded once.
	finishing atomic.Bool
	// taskDeleted is set once Exits.finish has deleted the exited task: the container
	// is EXITED for good, so its removal has no task to delete.
	taskDeleted atomic.Bool
}

func (c *Container) setRootfs(m []mount.Mount) {
	c.mu.Lock()
	c.rootfs, c.rootfsKept = m, true
	c.mu.Unlock()
}

// takeRootfs returns the kept mounts of the writable layer, if any, and forgets
// them: a task is created once.
func (c *Container) takeRootfs() ([]mount.Mount, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.rootfs, c.rootfsKept
	c.rootfs, c.rootfsKept = nil, false
	return m, ok
}

// containerStatus is the mutable part, persisted atomically beside the record so it
// survives shimd restarts.
type containerStatus struct {
	State      runtimeapi.ContainerState `json:"state"`
	Pid        uint32                    `json:"pid,omitempty"`
	StartedAt  int64                     `json:"started_at,omitempty"`
	FinishedAt int64                     `json:"finished_at,omitempty"`
	ExitCode   int32                     `json:"exit_code"`
	Reason     string                    `json:"reason,omitempty"`
	Message    string                    `json:"message,omitempty"`
	// Starting is set while StartContainer runs, so Remove waits and Stop is safe.
	Starting bool `json:"-"`
	// StartRecovered is set by recovery for a container whose StartContainer was cut
	// short after the task started: the kubelet's retry of that call succeeds.
	StartRecovered bool `json:"-"`
}

// Resources returns the container's current resource limits.
func (c *Container) Resources() *runtimeapi.LinuxContainerResources {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resources != nil {
		return c.resources
	}
	return c.Config.GetLinux().GetResources()
}

// Status returns a copy of the mutable status.
func (c *Container) Status() containerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Update changes the status with fn and persists it. An error from fn cancels the
// change. A failure to persist is returned but the change stays: the status in memory
// is what happened to the process, the file only what a restart of shimd will see.
// Updates are serialised, so the file always holds the latest status.
func (c *Container) Update(fn func(st *containerStatus) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.status
	if err := fn(&st); err != nil {
		return err
	}
	c.status = st
	return writeStatus(c.statusDir, st)
}

// beginStart marks a CREATED container as starting (in memory). started is true for
// the retry of a StartContainer that shimd's crash cut short after the task had
// started (recovery set StartRecovered): that start succeeded.
func (c *Container) beginStart() (started bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status.StartRecovered {
		return true, nil
	}
	if c.status.State != runtimeapi.ContainerState_CONTAINER_CREATED || c.status.Starting {
		return false, fmt.Errorf("container %s is %s, not CREATED: %w", c.ID, c.status.State, errdefs.ErrFailedPrecondition)
	}
	c.status.Starting = true
	c.startDone = make(chan struct{})
	return false, nil
}

// endStart tells that the StartContainer beginStart let in has returned.
func (c *Container) endStart() {
	c.mu.Lock()
	if c.startDone != nil {
		close(c.startDone)
		c.startDone = nil
	}
	c.mu.Unlock()
}

// startRunning returns a channel closed when the StartContainer in progress
// returns, or nil when none is.
func (c *Container) startRunning() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startDone
}

// setStarting sets the in-memory Starting flag (not persisted).
func (c *Container) setStarting(v bool) {
	c.mu.Lock()
	c.status.Starting = v
	c.mu.Unlock()
}

// IO returns the container's IO, nil before start and after exit.
func (c *Container) IO() *containerIO {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.io
}

func (c *Container) setIO(cio *containerIO) {
	c.mu.Lock()
	c.io = cio
	c.mu.Unlock()
}

// markOOM remembers an OOM kill, reported as the reason of the exit.
func (c *Container) markOOM() {
	c.mu.Lock()
	c.ooms++
	c.mu.Unlock()
}

// oomCount is the number of OOM events seen for the container's cgroup.
func (c *Container) oomCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ooms
}

// exitInputs returns what finishing the container needs: whether it has exited
// already, and its IO.
func (c *Container) exitInputs() (exited bool, cio *containerIO) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status.State == runtimeapi.ContainerState_CONTAINER_EXITED, c.io
}

// oomFacts returns what tells an OOM-killed exit: the OOM events seen, the pod's
// OOM kill count at task create, and whether shimd sent SIGKILL itself.
func (c *Container) oomFacts() (ooms int, base podOOMBase, killedByShimd bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ooms, c.podOOM, c.killedByShimd
}

// setPodOOMBase records the pod's OOM kill count at task create.
func (c *Container) setPodOOMBase(b podOOMBase) {
	c.mu.Lock()
	c.podOOM = b
	c.killedByShimd = false
	c.mu.Unlock()
}

// markKilledByShimd records that shimd sent the task SIGKILL.
func (c *Container) markKilledByShimd() {
	c.mu.Lock()
	c.killedByShimd = true
	c.mu.Unlock()
}

// setResources records the limits of an UpdateContainerResources.
func (c *Container) setResources(res *runtimeapi.LinuxContainerResources) {
	c.mu.Lock()
	c.resources = res
	c.mu.Unlock()
}
