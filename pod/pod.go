// Package pod holds the facts about a pod sandbox that its containers and the OCI
// spec builder need, as plain values the sandbox manager hands out. It does no I/O
// and imports none of shimd's packages: whatever a container needs of its pod is
// here, and nothing outside package sandbox sees the sandbox manager's own types.
package pod

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// State is a pod's state when its facts were read (sandbox/sandbox.go draws the
// state machine).
type State int

const (
	Ready State = iota
	NotReady
)

func (s State) String() string {
	if s == Ready {
		return "READY"
	}
	return "NOTREADY"
}

// Pod is a snapshot of one pod sandbox's facts. Config is shared with the sandbox
// manager and must not be changed.
type Pod struct {
	ID   string
	Name string // the name it was reserved under (MakeName)
	// Config is the CRI config of RunPodSandbox.
	Config         *runtimeapi.PodSandboxConfig
	RuntimeHandler string
	CreatedAt      time.Time
	State          State
	// NetNSPath is empty for host-network pods. A pause-less pod's containers join
	// the namespaces pinned at NetNSPath, IPCNSPath and UTSNSPath ("" = the host's);
	// other pods' containers join the pause process's, through /proc/<PID>/ns.
	NetNSPath            string
	IPCNSPath, UTSNSPath string
	Pauseless            bool
	// PID is the pause process's pid (0 when it is not running).
	PID uint32
	IPs []string
	// InStore: the pod is recorded in containerd's sandbox store, so its containers
	// are created in the pod's sandbox and run in its shim.
	InStore bool
	// Overhead and Resources are the last UpdatePodSandboxResources (nil before one).
	Overhead, Resources *runtimeapi.LinuxContainerResources
	// Files are the pod's files its containers mount.
	Files Files
	// ProcessLabel and MountLabel are the pod's SELinux labels ("" without SELinux).
	ProcessLabel, MountLabel string
}

// Files are the paths of the pod's files that its containers mount.
type Files struct {
	Hostname, Hosts, ResolvConf string
	// Shm is the pod's /dev/shm ("/dev/shm" itself when the pod uses the host IPC
	// namespace).
	Shm string
}

// HostNetwork tells whether the pod uses the node's network namespace.
func (p Pod) HostNetwork() bool {
	return p.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// HostPIDOrIPC tells whether a pod config uses the node's PID or IPC namespace.
func HostPIDOrIPC(cfg *runtimeapi.PodSandboxConfig) bool {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	return ns.GetPid() == runtimeapi.NamespaceMode_NODE || ns.GetIpc() == runtimeapi.NamespaceMode_NODE
}

// UserNamespace returns the pod's own user namespace options, or nil when the pod
// uses the node's user namespace.
func (p Pod) UserNamespace() *runtimeapi.UserNamespace {
	return UserNamespace(p.Config)
}

// UserNamespace returns the own user namespace options of a pod config, or nil.
func UserNamespace(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.UserNamespace {
	u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD {
		return nil
	}
	return u
}

// MakeName is the unique name a sandbox is reserved under: the kubelet's identity of
// a pod attempt.
func MakeName(md *runtimeapi.PodSandboxMetadata) string {
	return strings.Join([]string{md.GetName(), md.GetNamespace(), md.GetUid(), fmt.Sprint(md.GetAttempt())}, "_")
}

// NewID makes a random 64-hex-digit id for a sandbox or container.
func NewID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// CgroupPath is the cgroup of a sandbox or container under its parent, as runc takes
// it (cgroupsPath). An empty parent leaves containerd's default (/<namespace>/<id>).
func CgroupPath(parent, id, driver string) string {
	if parent == "" {
		return ""
	}
	if driver == "systemd" {
		// slice:prefix:name, as runc's systemd driver takes it.
		return filepath.Base(parent) + ":shimd:" + id
	}
	return filepath.Join(parent, id)
}

// The CRI annotations containerd's CRI plugin puts on a pod's pause container and
// its containers, for every runtime handler (its internal/cri/annotations with
// sandbox=true, and the sandbox resources of podsandbox/sandbox_run_linux.go).
// Sandboxed runtimes read them: runsc makes the pause container a new gVisor sandbox
// (container-type "sandbox") and puts each container whose sandbox-id names it into
// that sandbox; Kata sizes the VM from the sandbox resources.
const (
	AnnotationContainerType    = "io.kubernetes.cri.container-type"
	AnnotationSandboxID        = "io.kubernetes.cri.sandbox-id"
	AnnotationSandboxName      = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	AnnotationSandboxUID       = "io.kubernetes.cri.sandbox-uid"
	AnnotationSandboxLogDir    = "io.kubernetes.cri.sandbox-log-directory"
	AnnotationSandboxImageName = "io.kubernetes.cri.podsandbox.image-name"
	AnnotationSandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
	AnnotationSandboxCPUQuota  = "io.kubernetes.cri.sandbox-cpu-quota"
	AnnotationSandboxCPUShares = "io.kubernetes.cri.sandbox-cpu-shares"
	AnnotationSandboxMemory    = "io.kubernetes.cri.sandbox-memory"
)
