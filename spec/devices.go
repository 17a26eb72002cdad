package spec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// deviceOpts adds the config's devices to the container and allows them in the device
// cgroup with their permissions. The nodes come from Input.DeviceNodes; with
// Input.DeviceOwnershipFromSecurityContext they belong to the container's
// run_as_user and run_as_group where those are not 0, as containerd and CRI-O do
// with device_ownership_from_security_context, so that a non-root container may open
// a device only root may open on the host.
func deviceOpts(in Input) ([]oci.SpecOpts, error) {
	var (
		devices []specs.LinuxDevice
		rules   []specs.LinuxDeviceCgroup
	)
	var owner, group *uint32
	if in.DeviceOwnershipFromSecurityContext {
		sc := in.Config.GetLinux().GetSecurityContext()
		if uid := sc.GetRunAsUser().GetValue(); uid != 0 {
			owner = ptrTo(uint32(uid))
		}
		if gid := sc.GetRunAsGroup().GetValue(); gid != 0 {
			group = ptrTo(uint32(gid))
		}
	}
	for i, d := range in.Config.GetDevices() {
		field := fmt.Sprintf("config.devices[%d]", i)
		host, ctr := d.GetHostPath(), d.GetContainerPath()
		if ctr == "" {
			ctr = host
		}
		if !path.IsAbs(ctr) {
			return nil, invalid(field+".container_path", "%q is not absolute", ctr)
		}
		if !validDeviceAccess(d.GetPermissions()) {
			return nil, invalid(field+".permissions", "%q is not a subset of \"rwm\"", d.GetPermissions())
		}
		nodes, ok := in.DeviceNodes[host]
		if !ok {
			return nil, invalid(field+".host_path", "%q was not read from the host", host)
		}
		for _, n := range nodes {
			rel, err := filepath.Rel(host, n.Path)
			if err != nil || !filepath.IsLocal(rel) {
				return nil, invalid(field+".host_path", "device node %q is not under %q", n.Path, host)
			}
			n.Path = path.Join(ctr, rel)
			if owner != nil {
				n.UID = owner
			}
			if group != nil {
				n.GID = group
			}
			devices = append(devices, n)
			major, minor := n.Major, n.Minor
			rules = append(rules, specs.LinuxDeviceCgroup{
				Allow: true, Type: n.Type, Major: &major, Minor: &minor, Access: d.GetPermissions(),
			})
		}
	}
	if len(devices) == 0 {
		return nil, nil
	}
	return []oci.SpecOpts{optFunc(func(s *specs.Spec) {
		s.Linux.Devices = append(s.Linux.Devices, devices...)
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, rules...)
	})}, nil
}

func ptrTo[T any](v T) *T { return &v }

// validDeviceAccess accepts a non-empty subset of "rwm", each letter once (as CRI-O).
func validDeviceAccess(p string) bool {
	if p == "" {
		return false
	}
	seen := map[rune]bool{}
	for _, c := range p {
		if (c != 'r' && c != 'w' && c != 'm') || seen[c] {
			return false
		}
		seen[c] = true
	}
	return true
}

// withHostDevices gives a privileged container every host device and access to all
// devices in the device cgroup. A config device at the same path keeps its entry.
func withHostDevices(host []specs.LinuxDevice) oci.SpecOpts {
	return optFunc(func(s *specs.Spec) {
		for _, d := range host {
			if !slices.ContainsFunc(s.Linux.Devices, func(o specs.LinuxDevice) bool { return o.Path == d.Path }) {
				s.Linux.Devices = append(s.Linux.Devices, d)
			}
		}
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	})
}

// ReadDevices reads from the host the device nodes that the config's devices name,
// for Input.DeviceNodes. It is not pure: it follows a symlinked host_path and walks a
// directory (skipping what containerd skips: pts, shm, fd, mqueue, console, FIFOs).
// The nodes keep their paths under host_path as given. A missing host_path (also
// one under a file, ENOTDIR) is NotFound; one that is no device, a directory outside
// /dev, a symlink loop or a name too long InvalidArgument.
func ReadDevices(devices []*runtimeapi.Device) (map[string][]specs.LinuxDevice, error) {
	out := map[string][]specs.LinuxDevice{}
	for i, d := range devices {
		host := d.GetHostPath()
		if _, done := out[host]; done {
			continue
		}
		if !filepath.IsAbs(host) {
			return nil, invalid(fmt.Sprintf("config.devices[%d].host_path", i), "%q is not absolute", host)
		}
		nodes, err := readDeviceNodes(host)
		if err != nil {
			return nil, fmt.Errorf("config.devices[%d].host_path %q: %w", i, host, err)
		}
		out[host] = nodes
	}
	return out, nil
}

func readDeviceNodes(host string) ([]specs.LinuxDevice, error) {
	// Stat first: it says ELOOP where EvalSymlinks only says "too many links".
	fi, err := os.Stat(host)
	if err != nil {
		return nil, ClassifyPathError(err)
	}
	resolved, err := filepath.EvalSymlinks(host)
	if err != nil {
		return nil, ClassifyPathError(err)
	}
	if fi.IsDir() && resolved != "/dev" && !strings.HasPrefix(resolved, "/dev/") {
		// A directory is walked for its device nodes: one outside /dev holds none
		// worth the walk ("/" would walk the whole host, /proc included).
		return nil, fmt.Errorf("%q is a directory outside /dev: %w", resolved, errdefs.ErrInvalidArgument)
	}
	// oci.WithDevices does containerd's walk; run it on a scratch spec.
	scratch := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
	if err := oci.WithDevices(resolved, "", "rwm")(context.Background(), nil, nil, scratch); err != nil {
		if errors.Is(err, oci.ErrNotADevice) {
			return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
		}
		return nil, err
	}
	nodes := scratch.Linux.Devices
	for i := range nodes {
		rel, err := filepath.Rel(resolved, nodes[i].Path)
		if err != nil {
			return nil, err
		}
		nodes[i].Path = filepath.Join(host, rel)
	}
	return nodes, nil
}

// ClassifyPathError gives a failed lookup of a path named in a request its class: a
// path that does not exist (ENOENT, or ENOTDIR: a file where a directory should be)
// is NotFound; a symlink loop or a name too long InvalidArgument. Other errors (the
// node's own trouble) keep theirs.
func ClassifyPathError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return err
}
