package spec

import (
	"fmt"
	"slices"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nsPath is a namespace of a process, as runc joins it.
func nsPath(pid uint32, ns string) string {
	return fmt.Sprintf("/proc/%d/ns/%s", pid, ns)
}

// podNamespaces are the pod-level namespace modes; the sandbox config is the authority
// for network and IPC (the pause container was made from it).
func podNamespaces(in Input) *runtimeapi.NamespaceOption {
	return in.SandboxConfig.GetLinux().GetSecurityContext().GetNamespaceOptions()
}

func hostNetwork(in Input) bool {
	return podNamespaces(in).GetNetwork() == runtimeapi.NamespaceMode_NODE
}

func hostIPC(in Input) bool {
	return podNamespaces(in).GetIpc() == runtimeapi.NamespaceMode_NODE
}

// namespaceOpts joins the pause process's network, IPC and UTS namespaces (the host's
// when the pod uses the host's; a pause-less pod's pinned ones by path), picks the PID namespace by the container's mode, and
// adds the pod's user namespace. The mount namespace is always new.
func namespaceOpts(in Input) ([]oci.SpecOpts, error) {
	pid := in.SandboxPID
	if !hostNetwork(in) && in.NetNSPath == "" {
		return nil, invalid("net_ns_path", "empty, but the pod does not use the host network")
	}
	set := map[specs.LinuxNamespaceType]string{
		specs.NetworkNamespace: nsPath(pid, "net"),
		specs.IPCNamespace:     nsPath(pid, "ipc"),
		specs.UTSNamespace:     nsPath(pid, "uts"),
	}
	if in.Pauseless {
		// The pod's namespaces are pinned by shimd; "" entries are the host's, which
		// the remove list below takes care of.
		set[specs.NetworkNamespace], set[specs.IPCNamespace], set[specs.UTSNamespace] = in.NetNSPath, in.IPCNSPath, in.UTSNSPath
		if !hostIPC(in) && in.IPCNSPath == "" {
			return nil, invalid("ipc_ns_path", "empty, but the pod has its own IPC namespace and no pause process")
		}
		if !hostNetwork(in) && in.UTSNSPath == "" {
			return nil, invalid("uts_ns_path", "empty, but the pod has its own UTS namespace and no pause process")
		}
	}
	var remove []specs.LinuxNamespaceType
	if hostNetwork(in) {
		remove = append(remove, specs.NetworkNamespace, specs.UTSNamespace)
	}
	if hostIPC(in) {
		remove = append(remove, specs.IPCNamespace)
	}
	nsOpts := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	switch mode := nsOpts.GetPid(); mode {
	case runtimeapi.NamespaceMode_POD:
		if in.Pauseless {
			// The pod's config said its PID namespace is not shared (else it would
			// have a pause): there is none to join, the container gets its own, as
			// in CRI-O without its infra container.
			set[specs.PIDNamespace] = ""
			break
		}
		set[specs.PIDNamespace] = nsPath(pid, "pid")
	case runtimeapi.NamespaceMode_CONTAINER:
		set[specs.PIDNamespace] = ""
	case runtimeapi.NamespaceMode_NODE:
		remove = append(remove, specs.PIDNamespace)
	case runtimeapi.NamespaceMode_TARGET:
		if in.TargetPID == 0 {
			return nil, invalid("config.linux.security_context.namespace_options.target_id",
				"%q: no running target container", nsOpts.GetTargetId())
		}
		set[specs.PIDNamespace] = nsPath(in.TargetPID, "pid")
	default:
		return nil, invalid("config.linux.security_context.namespace_options.pid", "unknown mode %d", mode)
	}
	if in.UnifiedCgroups && !in.Config.GetLinux().GetSecurityContext().GetPrivileged() {
		set[specs.CgroupNamespace] = ""
	}
	uids, gids, err := usernsMappings(in)
	if err != nil {
		return nil, err
	}
	if uids != nil {
		if in.Pauseless {
			return nil, invalid("config.linux.security_context.namespace_options.userns_options",
				"the pod has no pause process whose user namespace it could join")
		}
		set[specs.UserNamespace] = nsPath(pid, "user")
	}
	return []oci.SpecOpts{optFunc(func(s *specs.Spec) {
		s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
			_, replaced := set[ns.Type]
			return replaced || slices.Contains(remove, ns.Type)
		})
		for _, typ := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace,
			specs.IPCNamespace, specs.UTSNamespace, specs.UserNamespace, specs.CgroupNamespace} {
			if p, ok := set[typ]; ok && !slices.Contains(remove, typ) {
				s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: typ, Path: p})
			}
		}
		s.Linux.UIDMappings, s.Linux.GIDMappings = uids, gids
	})}, nil
}

// usernsMappings are the pod's user namespace mappings, nil unless the pod has its own
// user namespace (mode POD). The container's options, when given, must match the pod's.
func usernsMappings(in Input) (uids, gids []specs.LinuxIDMapping, err error) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	pod := podNamespaces(in).GetUsernsOptions()
	if c := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); c != nil {
		if pod == nil || c.GetMode() != pod.GetMode() ||
			!slices.EqualFunc(c.GetUids(), pod.GetUids(), sameIDMapping) ||
			!slices.EqualFunc(c.GetGids(), pod.GetGids(), sameIDMapping) {
			return nil, nil, invalid(field, "differs from the pod's")
		}
	}
	switch mode := pod.GetMode(); {
	case pod == nil || mode == runtimeapi.NamespaceMode_NODE:
		if len(pod.GetUids()) != 0 || len(pod.GetGids()) != 0 {
			return nil, nil, invalid(field, "mappings given for the host user namespace")
		}
		return nil, nil, nil
	case mode == runtimeapi.NamespaceMode_POD:
		if len(pod.GetUids()) == 0 || len(pod.GetGids()) == 0 {
			return nil, nil, invalid(field, "a pod user namespace needs uid and gid mappings")
		}
		return idMappings(pod.GetUids()), idMappings(pod.GetGids()), nil
	default:
		return nil, nil, invalid(field, "unsupported mode %s", mode)
	}
}

func sameIDMapping(a, b *runtimeapi.IDMapping) bool {
	return a.GetHostId() == b.GetHostId() && a.GetContainerId() == b.GetContainerId() &&
		a.GetLength() == b.GetLength()
}

func idMappings(m []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	if len(m) == 0 {
		return nil
	}
	out := make([]specs.LinuxIDMapping, 0, len(m))
	for _, id := range m {
		out = append(out, specs.LinuxIDMapping{ContainerID: id.GetContainerId(), HostID: id.GetHostId(), Size: id.GetLength()})
	}
	return out
}
