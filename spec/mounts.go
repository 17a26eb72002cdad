package spec

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
)

// Files every container gets from its pod, unless the config mounts its own there.
const (
	etcHostname   = "/etc/hostname"
	etcHosts      = "/etc/hosts"
	etcResolvConf = "/etc/resolv.conf"
	devShm        = "/dev/shm"
)

// mountOpts turns the config's mounts and the pod's files into bind mounts. The
// runtime's default mounts (/proc, /dev, /sys, ...) stay unless a bind mount takes
// their place; /run is dropped, as in containerd's CRI plugin.
//
// Unlike containerd, nothing here touches the host: a missing host path is not
// created (CreateContainer refuses it as NotFound first, container/create_checks.go)
// and the propagation of the source mount is not checked (runc fails or the
// propagation does not happen).
func mountOpts(in Input) ([]oci.SpecOpts, error) {
	binds, rootPropagation, err := criMounts(in)
	if err != nil {
		return nil, err
	}
	binds = append(binds, podFileMounts(in, binds)...)
	// Parents before children, so that a mount never hides a deeper one.
	sort.SliceStable(binds, func(i, j int) bool { return depth(binds[i].Destination) < depth(binds[j].Destination) })

	sysBind := hostNetwork(in) && hasPodUserns(in)
	privileged := in.Config.GetLinux().GetSecurityContext().GetPrivileged()
	roRecursive := "ro"
	if in.RecursiveReadOnlyMounts {
		roRecursive = "rro"
	}
	return []oci.SpecOpts{optFunc(func(s *specs.Spec) {
		defaults := append(s.Mounts, specs.Mount{
			Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"},
		})
		if sysBind {
			// sysfs cannot be mounted in a user namespace that does not own the
			// network namespace: bind the host's /sys read-only instead.
			defaults = slices.DeleteFunc(defaults, func(m specs.Mount) bool { return m.Destination == "/sys" })
			defaults = append(defaults, specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys",
				Options: []string{"rbind", roRecursive, "nosuid", "nodev", "noexec"}})
		}
		s.Mounts = append(keptDefaults(defaults, binds), binds...)
		if privileged {
			writable(s.Mounts, "sysfs", "cgroup")
		}
		if rootPropagation != "" {
			s.Linux.RootfsPropagation = rootPropagation
		}
	})}, nil
}

// criMounts validates and converts the config's mounts. rootPropagation is what the
// rootfs needs for the mounts' propagation to work: "rshared" if any is
// bidirectional, else "rslave" if any is host-to-container, else "".
func criMounts(in Input) (mounts []specs.Mount, rootPropagation string, err error) {
	for i, m := range in.Config.GetMounts() {
		field := fmt.Sprintf("config.mounts[%d]", i)
		src, dst := m.GetHostPath(), m.GetContainerPath()
		if m.GetImage() != nil && src == "" {
			return nil, "", invalid(field+".image", "image volume %q was not mounted by the caller", m.GetImage().GetImage())
		}
		if err := validHostPath(src); err != nil {
			return nil, "", invalid(field+".host_path", "%q %v", src, err)
		}
		if !path.IsAbs(dst) {
			return nil, "", invalid(field+".container_path", "%q is not absolute", dst)
		}
		opts := []string{"rbind"}
		switch p := m.GetPropagation(); p {
		case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
			opts = append(opts, "rprivate")
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			opts = append(opts, "rslave")
			if rootPropagation == "" {
				rootPropagation = "rslave"
			}
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			opts = append(opts, "rshared")
			rootPropagation = "rshared"
		default:
			return nil, "", invalid(field+".propagation", "unknown propagation %d", p)
		}
		mode, err := mountMode(m, in.RecursiveReadOnlyMounts)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", field, err)
		}
		flags, err := mountFlagOptions(field, m.GetMountOptions(), in.MountOptions)
		if err != nil {
			return nil, "", err
		}
		if slices.Contains(flags, "ro") {
			mode, flags = "ro", slices.DeleteFunc(flags, func(o string) bool { return o == "ro" })
			if m.GetRecursiveReadOnly() {
				mode = "rro"
			}
		}
		mounts = append(mounts, specs.Mount{
			Destination: path.Clean(dst), Type: "bind", Source: path.Clean(src),
			Options:     append(append(opts, mode), flags...),
			UIDMappings: idMappings(m.GetUidMappings()), GIDMappings: idMappings(m.GetGidMappings()),
		})
	}
	return mounts, rootPropagation, nil
}

// validHostPath accepts an absolute path with no ".." element.
func validHostPath(p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("is not absolute")
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("has a \"..\" element")
	}
	return nil
}

// mountMode is "rw", "ro" or, for a recursive read-only mount, "rro".
func mountMode(m *runtimeapi.Mount, rroSupported bool) (string, error) {
	switch {
	case !m.GetRecursiveReadOnly() && m.GetReadonly():
		return "ro", nil
	case !m.GetRecursiveReadOnly():
		return "rw", nil
	case !m.GetReadonly():
		return "", invalid("recursive_read_only", "needs readonly")
	case m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		return "", invalid("recursive_read_only", "needs private propagation, got %s", m.GetPropagation())
	case !rroSupported:
		// A node feature that is missing, not a bad request: NotImplemented.
		return "", fmt.Errorf("recursive_read_only: %w: the OCI runtime does not support recursive read-only mounts: %w",
			crierrors.ErrRROUnsupported, errdefs.ErrNotImplemented)
	}
	return "rro", nil
}

// podFileMounts binds the pod's hostname, hosts, resolv.conf and /dev/shm, each
// unless the config mounts something at that path or the pod has no such file. The
// /etc files follow readonly_rootfs and are id-mapped in a pod user namespace.
func podFileMounts(in Input, cri []specs.Mount) []specs.Mount {
	taken := func(dst string) bool {
		return slices.ContainsFunc(cri, func(m specs.Mount) bool { return m.Destination == dst })
	}
	mode := "rw"
	if in.Config.GetLinux().GetSecurityContext().GetReadonlyRootfs() {
		mode = "ro"
	}
	uids, gids, _ := usernsMappings(in) // validated by namespaceOpts
	var out []specs.Mount
	for _, f := range []struct{ dst, src string }{
		{etcHostname, in.HostnamePath}, {etcHosts, in.HostsPath}, {etcResolvConf, in.ResolvConfPath},
	} {
		if f.src != "" && !taken(f.dst) {
			out = append(out, specs.Mount{Destination: f.dst, Type: "bind", Source: f.src,
				Options: []string{"rbind", "rprivate", mode}, UIDMappings: uids, GIDMappings: gids})
		}
	}
	if in.ShmPath != "" && !taken(devShm) {
		out = append(out, specs.Mount{Destination: devShm, Type: "bind", Source: in.ShmPath,
			Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"}})
	}
	return out
}

// keptDefaults are the default mounts that no bind mount replaces; a bind mount at
// /dev replaces every default mount under /dev as well. /run is dropped.
func keptDefaults(defaults, binds []specs.Mount) []specs.Mount {
	replaced := map[string]bool{"/run": true}
	for _, m := range binds {
		replaced[m.Destination] = true
	}
	var out []specs.Mount
	for _, m := range defaults {
		dst := path.Clean(m.Destination)
		if replaced[dst] || (replaced["/dev"] && strings.HasPrefix(dst, "/dev/")) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// writable turns "ro" into "rw" on the mounts of the given types.
func writable(mounts []specs.Mount, types ...string) {
	for _, m := range mounts {
		if slices.Contains(types, m.Type) {
			for i, o := range m.Options {
				if o == "ro" {
					m.Options[i] = "rw"
				}
			}
		}
	}
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }

func hasPodUserns(in Input) bool {
	u := podNamespaces(in).GetUsernsOptions()
	return u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD
}
