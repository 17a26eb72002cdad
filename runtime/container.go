package runtime

import (
	"sync"

	"github.com/shimd/shimd/runtime/spec"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container is one CRI container. Fields outside mu never change after Create.
//
//	CreateContainer ──► CREATED ──StartContainer──► RUNNING ──(exit / Stop)──► EXITED
//	                       │                                                   │
//	                       └───────────────RemoveContainer◄────────────────────┘
//	(a RUNNING container is stopped first by RemoveContainer)
//
// Lock order: containerStore.mu before Container.mu; neither is held across a
// containerd call.
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
	// Snapshotter keeps the writable layer; StopSignal is the image's.
	Snapshotter string
	StopSignal  string
	User        spec.User // resolved at create, reported in status

	mu     sync.Mutex
	status containerStatus
	// resources are the current limits: the config's, then UpdateContainerResources'.
	resources *runtimeapi.LinuxContainerResources
	io        *containerIO // nil until started or after exit
	// exited is closed (once, by closeOnce) when the container has exited and its
	// status is final.
	exited     chan struct{}
	exitedOnce sync.Once
	// oom is set when an OOM event was seen for the container's cgroup.
	oom bool
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
