// Package sandbox runs pod sandboxes: name reservation, network namespace and CNI
// through package network, the pause container on containerd, the pod's hostname,
// hosts, resolv.conf and /dev/shm, and recovery after a restart.
package sandbox

import (
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// A sandbox's state (pod.State):
//
//	Run ──► READY ──(pause exits / Stop)──► NOTREADY ──Remove──► (gone)
//	         (pause-less: a pinned namespace gone / Stop)
//	 │                                          ▲
//	 └──────────(Run fails: undone)─────────────┘ never recorded
//
// A sandbox is in the store only once Run has finished, after it was announced
// (NRI's RunPodSandbox); while Run is in flight only its name is reserved.

// Sandbox is one pod sandbox. Fields other than those under mu never change after
// Run has recorded it.
type Sandbox struct {
	ID             string
	Name           string
	Config         *runtimeapi.PodSandboxConfig
	RuntimeHandler string
	CreatedAt      time.Time
	// NetNSPath is empty for host-network pods.
	NetNSPath string
	IPs       []string
	// InStore: the pod is recorded in containerd's sandbox store (sandbox_store.go),
	// so its containers are created WithSandbox(ID) and run in its shim.
	InStore bool
	// Pauseless: the pod has no pause process (pauseless.go); its containers join the
	// namespaces pinned at NetNSPath, IPCNSPath and UTSNSPath ("" = the host's).
	Pauseless            bool
	IPCNSPath, UTSNSPath string
	// SharedRootfs: the pause container runs from the shared read-only
	// Options.PauseRootfs and has no snapshot of its own.
	SharedRootfs bool
	// ProcessLabel and MountLabel are the pod's SELinux labels ("" = none; see
	// package seclabel). A privileged pod's pause process runs without its label,
	// but the pod holds the level all the same, as with containerd.
	ProcessLabel, MountLabel string

	// opMu serialises Stop and Remove of this sandbox; it is held across their
	// containerd and CNI calls. Lock order: opMu, then mu.
	opMu sync.Mutex
	// mu guards the fields below; it is never held across I/O, so status reads and
	// the exit handler never wait for a teardown.
	mu    sync.Mutex
	state pod.State
	// pid is the pause process's pid (0 when it is not running, or not known yet):
	// containers join the pod's namespaces through /proc/<pid>/ns.
	pid     uint32
	stopped bool // Stop has torn the network down
	// overhead and resources: the last UpdatePodSandboxResources.
	overhead, resources *runtimeapi.LinuxContainerResources

	// files are the paths of the pod's files, fixed for its life: reckoned once
	// (filesIn), not for every pod on every ListPodSandbox.
	filesOnce sync.Once
	files     pod.Files

	// pinsChecked is when a list last found a pause-less pod's pins mounted (Unix
	// nanoseconds; listState).
	pinsChecked atomic.Int64
}

// pinCheckEvery is how long a list trusts a pause-less pod's pins to be mounted
// after it last found them so: the kubelet lists every pod every second, and at 250
// pods a check on every list is 750 statfs calls a second (a period of one second
// saved nothing: each list came just after it ran out). A pin removed by hand (the
// only way one goes while the pod is READY) shows in lists within this time, the
// kubelet's stats period, and at once in PodSandboxStatus, which checks on every
// call.
const pinCheckEvery = 10 * time.Second

// filesIn returns the paths of the pod's files in l, reckoned on the first call.
func (s *Sandbox) filesIn(l layout) pod.Files {
	s.filesOnce.Do(func() { s.files = l.files(s) })
	return s.files
}

// PodResources returns the pod-level overhead and resources of the last
// UpdatePodSandboxResources (nil before one).
func (s *Sandbox) PodResources() (overhead, resources *runtimeapi.LinuxContainerResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overhead, s.resources
}

// State returns the current state. A pause-less pod whose pinned namespaces are gone
// turns NOTREADY here.
func (s *Sandbox) State() pod.State {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st == pod.Ready && s.Pauseless && !pinsAlive(s) { // statfs, outside mu
		s.setState(pod.NotReady)
		return pod.NotReady
	}
	return st
}

// listState is State for lists: a pause-less pod's pins are checked at most once
// per pinCheckEvery (now is the list's time).
func (s *Sandbox) listState(now time.Time) pod.State {
	if !s.Pauseless || now.UnixNano()-s.pinsChecked.Load() < int64(pinCheckEvery) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.state
	}
	st := s.State()
	if st == pod.Ready {
		s.pinsChecked.Store(now.UnixNano())
	}
	return st
}

// PausePID is the pause process's pid: 0 when it does not run, or while recovery
// could not read it yet (recheckPause).
func (s *Sandbox) PausePID() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

func (s *Sandbox) setPausePID(pid uint32) {
	s.mu.Lock()
	s.pid = pid
	s.mu.Unlock()
}

func (s *Sandbox) setState(st pod.State) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

// isStopped tells whether Stop has torn the network down.
func (s *Sandbox) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// HostNetwork tells whether the pod uses the node's network namespace.
func (s *Sandbox) HostNetwork() bool {
	return s.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// UserNamespace returns the pod's own user namespace options, or nil when the pod
// uses the node's user namespace.
func (s *Sandbox) UserNamespace() *runtimeapi.UserNamespace { return pod.UserNamespace(s.Config) }
