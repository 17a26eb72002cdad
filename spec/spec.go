// Package spec builds the OCI runtime spec of a CRI container.
//
// Container is a pure function of its Input: the caller does every read beforehand
// (ResolveUser on the rootfs, ReadDevices and oci.HostDevices on the host, the
// Localhost seccomp profile, the features of the OCI runtime) and passes the results in.
// The rules follow the kubelet and containerd's CRI plugin; where shimd differs, the
// function that does it says why.
//
// Order of the steps in Container (later steps see what earlier ones set):
//
//  1. process: args, cwd, env, tty, hostname, user, no_new_privs, rlimits
//  2. namespaces joined from the pause process, user namespace mappings
//  3. mounts: CRI mounts, pod files (/etc/hosts, ...), /dev/shm, cgroup
//  4. devices
//  5. security: capabilities, privileged, masked/readonly paths, then seccomp
//     (the default profile depends on the capabilities) and AppArmor
//  6. resources, oom_score_adj, cgroup path
//  7. annotations
package spec

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// CRI annotations on every container spec, as containerd's CRI plugin sets them for
// every runtime handler (the pod's are in package sandbox, which sets them on the pause
// container). runsc puts a container whose sandbox-id names a pod into that pod's
// gVisor sandbox.
const (
	AnnotationContainerType    = pod.AnnotationContainerType
	AnnotationSandboxID        = pod.AnnotationSandboxID
	AnnotationSandboxName      = pod.AnnotationSandboxName
	AnnotationSandboxNamespace = pod.AnnotationSandboxNamespace
	AnnotationSandboxUID       = pod.AnnotationSandboxUID
	AnnotationContainerName    = "io.kubernetes.cri.container-name"
	AnnotationImageName        = "io.kubernetes.cri.image-name"

	// ContainerTypeContainer is the value of AnnotationContainerType for containers.
	ContainerTypeContainer = "container"
)

// Input is everything a container's OCI spec depends on; the caller does all I/O
// (reads the image config, resolves users in the rootfs, loads seccomp profiles).
type Input struct {
	ID            string
	Namespace     string // containerd namespace (default cgroup path /<ns>/<id> when CgroupsPath is "")
	SandboxID     string
	Config        *runtimeapi.ContainerConfig
	SandboxConfig *runtimeapi.PodSandboxConfig
	Image         ocispec.ImageConfig // Entrypoint, Cmd, Env, WorkingDir (User: see ResolveUser)
	ImageName     string              // for annotations
	User          User                // resolved by the caller, see ResolveUser

	// The pod: pause process pid (namespaces are joined via /proc/<pid>/ns/*), its
	// netns path ("" = host network), and the pod files containers mount ("" = none).
	SandboxPID uint32
	NetNSPath  string
	// Pauseless: the pod has no pause process (SandboxPID is 0); containers join the
	// namespaces pinned at NetNSPath, IPCNSPath and UTSNSPath ("" = the host's).
	Pauseless            bool
	IPCNSPath, UTSNSPath string
	HostnamePath         string
	HostsPath            string
	ResolvConfPath       string
	ShmPath              string // "/dev/shm" when the pod uses the host IPC namespace
	// TargetPID is the pid of the target container for NamespaceMode_TARGET.
	TargetPID uint32

	CgroupDriver string // "cgroupfs" or "systemd"; informational, CgroupsPath is final
	// CgroupsPath is the container's cgroup, computed by the caller from the pod's
	// cgroup parent and the driver; "" keeps containerd's default /<namespace>/<id>.
	CgroupsPath string
	// MinOOMScoreAdj: never give a lower oom_score_adj than this (shimd's own value;
	// lowering needs CAP_SYS_RESOURCE which a node may lack). Clamped, not an error.
	MinOOMScoreAdj int

	// SeccompLocalhost is the content of a Localhost seccomp profile, read by the
	// caller from SeccompLocalhostPath.
	SeccompLocalhost []byte
	// AppArmorEnabled: false when the kernel has no AppArmor; a Localhost profile is
	// then an error, RuntimeDefault and Unconfined run without a profile.
	AppArmorEnabled bool
	// AppArmorDefault is the runtime's default AppArmor profile, loaded on the node by
	// the caller, for containers that ask RuntimeDefault or nothing and are not
	// privileged (see AppArmorUsesDefault); "" = none: they run unconfined. Used only
	// with AppArmorEnabled.
	AppArmorDefault string

	// SELinuxProcessLabel and SELinuxMountLabel are the container's SELinux labels,
	// from its pod's and its own SELinuxOptions ("" = none: no SELinux). A
	// privileged container runs without the process label (containerd, CRI-O).
	SELinuxProcessLabel, SELinuxMountLabel string

	// AllCapabilities is what "privileged" and an added "ALL" grant: the capabilities
	// shimd itself holds (cap.Current() read once at start-up), as containerd does. Empty
	// means cap.Known(), which fails on a node whose bounding set lacks some of them.
	AllCapabilities []string
	// HostDevices are the host's device nodes (oci.HostDevices()), given to privileged
	// containers.
	HostDevices []specs.LinuxDevice
	// DeviceNodes maps each Config.Devices host_path to the device nodes found there on
	// the host, with their host paths (a directory maps to every node under it); see
	// ReadDevices.
	DeviceNodes map[string][]specs.LinuxDevice
	// DeviceOwnershipFromSecurityContext: the config's devices belong to its
	// run_as_user and run_as_group (where not 0), not to their host owners.
	DeviceOwnershipFromSecurityContext bool

	// Features of the node and of the OCI runtime in use.
	RecursiveReadOnlyMounts bool // the runtime supports "rro" mounts
	// MountOptions are the mount options the OCI runtime knows (`runc features`);
	// nil when it did not say.
	MountOptions []string
	// UnifiedCgroups: the host runs cgroup v2 only; containers then get a private cgroup
	// namespace unless privileged (containerd does not use one on cgroup v1).
	UnifiedCgroups bool
	// HugetlbController: the hugetlb cgroup controller exists; without it hugepage
	// limits are dropped (containerd's default tolerate_missing_hugetlb_controller).
	HugetlbController bool
}

// Container builds the OCI spec of a container. Bad input gives an error that wraps
// errdefs.ErrInvalidArgument and names the field.
func Container(in Input) (*specs.Spec, error) {
	if err := validateInput(in); err != nil {
		return nil, err
	}
	var opts []oci.SpecOpts
	for _, step := range []func(Input) ([]oci.SpecOpts, error){
		processOpts, namespaceOpts, mountOpts, deviceOpts, securityOpts, resourceOpts,
	} {
		o, err := step(in)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o...)
	}
	opts = append(opts, oci.WithAnnotations(annotations(in)))

	ctx := namespaces.WithNamespace(context.Background(), in.Namespace)
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: in.ID}, opts...)
}

func validateInput(in Input) error {
	switch {
	case in.ID == "":
		return invalid("id", "empty")
	case in.Namespace == "":
		return invalid("namespace", "empty")
	case in.Config == nil:
		return invalid("config", "missing")
	case in.SandboxConfig == nil:
		return invalid("sandbox_config", "missing")
	case in.SandboxPID == 0 && !in.Pauseless:
		return invalid("sandbox_pid", "no pause process to join")
	}
	return nil
}

// annotations are the config's annotations, less those runc reads as instructions,
// plus the CRI ones, which win.
func annotations(in Input) map[string]string {
	a := maps.Clone(in.Config.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	maps.DeleteFunc(a, func(k, _ string) bool { return UnsafeAnnotation(k) })
	md := in.SandboxConfig.GetMetadata()
	a[AnnotationContainerType] = ContainerTypeContainer
	a[AnnotationSandboxID] = in.SandboxID
	a[AnnotationSandboxName] = md.GetName()
	a[AnnotationSandboxNamespace] = md.GetNamespace()
	a[AnnotationSandboxUID] = md.GetUid()
	a[AnnotationContainerName] = in.Config.GetMetadata().GetName()
	a[AnnotationImageName] = in.ImageName
	return a
}

// UnsafeAnnotation tells an annotation runc reads as an instruction (runc features'
// potentiallyUnsafeConfigAnnotations): "org.systemd.property.*" sets properties of
// the container's systemd unit (ExecStopPost= runs a host command as root),
// "org.criu.config" names a CRIU configuration file (with action scripts), "bundle"
// a directory. A request's annotations never bring them into a spec (CRI-O's
// CVE-2024-3154; containerd passes only annotations its configuration allows).
func UnsafeAnnotation(k string) bool {
	return k == "bundle" || k == "org.criu.config" || strings.HasPrefix(k, "org.systemd.property.")
}

// invalid is an InvalidArgument error naming the field at fault.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// badImage is a FailedPrecondition error naming a field of the image's config: the
// request is sound, the image it names is not.
func badImage(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrFailedPrecondition)
}

// optFunc adapts a plain spec mutation to oci.SpecOpts.
func optFunc(f func(s *specs.Spec)) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		f(s)
		return nil
	}
}
