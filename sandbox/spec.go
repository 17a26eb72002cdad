package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pause container defaults, as the kubelet and other runtimes use them.
const (
	// DefaultSandboxOOMScoreAdj keeps the pause process among the last the OOM killer picks.
	DefaultSandboxOOMScoreAdj = -998
	// DefaultSandboxCPUShares is the pause container's CPU weight: it does no work.
	DefaultSandboxCPUShares = 2
	// DefaultShmSize is the size of the pod's /dev/shm tmpfs.
	DefaultShmSize = 64 << 20
)

// PauseSpecInput is everything the pause container's OCI spec depends on.
type PauseSpecInput struct {
	ID        string
	Namespace string // containerd namespace, used for the default cgroup path
	Config    *runtimeapi.PodSandboxConfig
	// ImageArgs is the pause image's entrypoint+cmd; ImageEnv its env.
	ImageArgs []string
	ImageEnv  []string
	// NetNSPath is the pod's network namespace; empty for host network.
	NetNSPath string
	// UsernsPath is the pod's own pinned user namespace (which owns NetNSPath); empty
	// when the pod uses the node's.
	UsernsPath string
	// CgroupDriver is "cgroupfs" or "systemd".
	CgroupDriver string
	// MinOOMScoreAdj is the lowest oom_score_adj shimd may give (its own value: lowering
	// below it needs CAP_SYS_RESOURCE, which a node may lack).
	MinOOMScoreAdj int
	// ImageName is the pause image's reference (for the annotations).
	ImageName string
}

// The CRI annotations containerd's CRI plugin puts on a pod's pause container, for
// every runtime handler (its internal/cri/annotations.DefaultCRIAnnotations with
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

func pauseAnnotations(in PauseSpecInput) map[string]string {
	md := in.Config.GetMetadata()
	a := map[string]string{
		AnnotationContainerType:    "sandbox",
		AnnotationSandboxID:        in.ID,
		AnnotationSandboxName:      md.GetName(),
		AnnotationSandboxNamespace: md.GetNamespace(),
		AnnotationSandboxUID:       md.GetUid(),
		AnnotationSandboxLogDir:    in.Config.GetLogDirectory(),
		AnnotationSandboxImageName: in.ImageName,
	}
	if res := in.Config.GetLinux().GetResources(); res != nil {
		a[AnnotationSandboxCPUPeriod] = strconv.FormatInt(res.GetCpuPeriod(), 10)
		a[AnnotationSandboxCPUQuota] = strconv.FormatInt(res.GetCpuQuota(), 10)
		a[AnnotationSandboxCPUShares] = strconv.FormatInt(res.GetCpuShares(), 10)
		a[AnnotationSandboxMemory] = strconv.FormatInt(res.GetMemoryLimitInBytes(), 10)
	}
	return a
}

// PauseSpec builds the pause container's OCI spec. It is a pure function of its input.
func PauseSpec(in PauseSpecInput) (*specs.Spec, error) {
	if len(in.ImageArgs) == 0 {
		return nil, fmt.Errorf("pause image has no entrypoint or command")
	}
	cfg := in.Config
	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	sc := cfg.GetLinux().GetSecurityContext()

	opts := []oci.SpecOpts{
		oci.WithProcessArgs(in.ImageArgs...),
		oci.WithEnv(in.ImageEnv),
		oci.WithProcessCwd("/"),
		oci.WithRootFSReadonly(),
		oci.WithNoNewPrivileges,
		oci.WithoutRunMount,
		oci.WithCPUShares(DefaultSandboxCPUShares),
		withOOMScoreAdj(clampOOM(DefaultSandboxOOMScoreAdj, in.MinOOMScoreAdj)),
		withoutRlimits, // inherit the shim's: raising them needs CAP_SYS_RESOURCE
		oci.WithAnnotations(pauseAnnotations(in)),
	}
	if nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostNamespace(specs.UTSNamespace))
	} else {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: in.NetNSPath}))
		if cfg.GetHostname() != "" {
			opts = append(opts, oci.WithHostname(cfg.GetHostname()))
		}
	}
	if nsOpts.GetPid() == runtimeapi.NamespaceMode_NODE {
		opts = append(opts, oci.WithHostNamespace(specs.PIDNamespace))
	}
	if nsOpts.GetIpc() == runtimeapi.NamespaceMode_NODE {
		opts = append(opts, oci.WithHostNamespace(specs.IPCNamespace))
	}
	if sysctls := cfg.GetLinux().GetSysctls(); len(sysctls) > 0 {
		opts = append(opts, withSysctls(sysctls))
	}
	if uid := sc.GetRunAsUser(); uid != nil {
		gid := uint32(0)
		if g := sc.GetRunAsGroup(); g != nil {
			gid = uint32(g.GetValue())
		}
		opts = append(opts, oci.WithUIDGID(uint32(uid.GetValue()), gid))
	}
	if groups := sc.GetSupplementalGroups(); len(groups) > 0 {
		opts = append(opts, withAdditionalGIDs(groups))
	}
	if sc.GetPrivileged() {
		opts = append(opts, oci.WithMaskedPaths(nil), oci.WithReadonlyPaths(nil))
	}
	if u := nsOpts.GetUsernsOptions(); u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD {
		opts = append(opts, oci.WithUserNamespace(idMappings(u.GetUids()), idMappings(u.GetGids())))
		if in.UsernsPath != "" {
			opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.UserNamespace, Path: in.UsernsPath}))
		}
	}
	if cg := CgroupPath(cfg.GetLinux().GetCgroupParent(), in.ID, in.CgroupDriver); cg != "" {
		opts = append(opts, oci.WithCgroup(cg))
	}

	ctx := namespaces.WithNamespace(context.Background(), in.Namespace)
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: in.ID}, opts...)
}

// CgroupPath is the cgroup of a sandbox or container under its parent. An empty parent
// leaves containerd's default (/<namespace>/<id>).
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

func idMappings(m []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	out := make([]specs.LinuxIDMapping, 0, len(m))
	for _, id := range m {
		out = append(out, specs.LinuxIDMapping{ContainerID: id.GetContainerId(), HostID: id.GetHostId(), Size: id.GetLength()})
	}
	return out
}

func withoutRlimits(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.Rlimits = nil
	return nil
}

func clampOOM(want, min int) int {
	if want < min {
		return min
	}
	return want
}

func withOOMScoreAdj(v int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.OOMScoreAdj = &v
		return nil
	}
}

func withSysctls(sysctls map[string]string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux.Sysctl == nil {
			s.Linux.Sysctl = map[string]string{}
		}
		for k, v := range sysctls {
			s.Linux.Sysctl[NormalizeSysctlName(k)] = v
		}
		return nil
	}
}

func withAdditionalGIDs(groups []int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for _, g := range groups {
			s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, uint32(g))
		}
		return nil
	}
}

// OwnOOMScoreAdj reads this process's oom_score_adj (0 if unreadable).
func OwnOOMScoreAdj(read func(string) ([]byte, error)) int {
	b, err := read("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(string(trimSpace(b)))
	if err != nil {
		return 0
	}
	return v
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// NormalizeSysctlName turns a sysctl name with '/' separators into the dotted form
// runc expects, as the kubelet does (k8s.io/component-helpers NormalizeName): if the
// first separator is '/', every '/' becomes '.' and every '.' becomes '/'
// ("net/ipv4/conf/eno2.100/rp_filter" is "net.ipv4.conf.eno2/100.rp_filter").
func NormalizeSysctlName(name string) string {
	i := strings.IndexAny(name, "./")
	if i == -1 || name[i] == '.' {
		return name
	}
	return swapDotsSlashes(name)
}

// swapDotsSlashes turns every '.' into '/' and every '/' into '.'.
func swapDotsSlashes(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, s)
}
