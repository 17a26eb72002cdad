package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/seclabel"
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
	// RootPath is the root directory, read-only; "": the bundle's "rootfs", where
	// the shim mounts the pod's snapshot.
	RootPath string
	// ProcessLabel and MountLabel are the pod's SELinux labels ("" = none). A
	// privileged pod's pause process runs without a label, as with containerd.
	ProcessLabel, MountLabel string
	// Sysctls are the pod's sysctls (pod.Sysctls: its config's and the defaults).
	Sysctls map[string]string
}

func pauseAnnotations(in PauseSpecInput) map[string]string {
	md := in.Config.GetMetadata()
	a := map[string]string{
		pod.AnnotationContainerType:    "sandbox",
		pod.AnnotationSandboxID:        in.ID,
		pod.AnnotationSandboxName:      md.GetName(),
		pod.AnnotationSandboxNamespace: md.GetNamespace(),
		pod.AnnotationSandboxUID:       md.GetUid(),
		pod.AnnotationSandboxLogDir:    in.Config.GetLogDirectory(),
		pod.AnnotationSandboxImageName: in.ImageName,
	}
	if res := in.Config.GetLinux().GetResources(); res != nil {
		a[pod.AnnotationSandboxCPUPeriod] = strconv.FormatInt(res.GetCpuPeriod(), 10)
		a[pod.AnnotationSandboxCPUQuota] = strconv.FormatInt(res.GetCpuQuota(), 10)
		a[pod.AnnotationSandboxCPUShares] = strconv.FormatInt(res.GetCpuShares(), 10)
		a[pod.AnnotationSandboxMemory] = strconv.FormatInt(res.GetMemoryLimitInBytes(), 10)
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
	if len(in.Sysctls) > 0 {
		opts = append(opts, withSysctls(in.Sysctls))
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
	opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		seclabel.SetSpec(s, in.ProcessLabel, in.MountLabel, sc.GetPrivileged())
		return nil
	})
	if u := nsOpts.GetUsernsOptions(); u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD {
		opts = append(opts, oci.WithUserNamespace(idMappings(u.GetUids()), idMappings(u.GetGids())))
		if nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE {
			// sysfs cannot be mounted in a user namespace that does not own the
			// network namespace; pause needs no /sys.
			opts = append(opts, withoutMount("/sys"))
		}
		if in.UsernsPath != "" {
			opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.UserNamespace, Path: in.UsernsPath}))
		}
	}
	if cg := pod.CgroupPath(cfg.GetLinux().GetCgroupParent(), in.ID, in.CgroupDriver); cg != "" {
		opts = append(opts, oci.WithCgroup(cg))
	}
	if in.RootPath != "" {
		opts = append(opts, oci.WithRootFSPath(in.RootPath))
	}

	ctx := namespaces.WithNamespace(context.Background(), in.Namespace)
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: in.ID}, opts...)
}

func idMappings(m []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	out := make([]specs.LinuxIDMapping, 0, len(m))
	for _, id := range m {
		out = append(out, specs.LinuxIDMapping{ContainerID: id.GetContainerId(), HostID: id.GetHostId(), Size: id.GetLength()})
	}
	return out
}

func withoutMount(dst string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dst })
		return nil
	}
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
			s.Linux.Sysctl[pod.NormalizeSysctlName(k)] = v
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
