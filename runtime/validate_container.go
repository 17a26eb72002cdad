package runtime

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/cap"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/spec"
)

// procBindTargets are the only paths under /proc runc lets a bind mount cover (the
// files lxcfs replaces; runc's checkProcMount).
var procBindTargets = []string{
	"/proc/cpuinfo", "/proc/diskstats", "/proc/meminfo", "/proc/stat", "/proc/swaps",
	"/proc/uptime", "/proc/loadavg", "/proc/slabinfo", "/proc/net/dev", "/proc/sys/kernel/ns_last_pid",
}

// validateContainerConfig rejects a ContainerConfig shimd cannot create on this node,
// naming the field.
func validateContainerConfig(cfg *runtimeapi.ContainerConfig, node container.NodeInfo) error {
	if cfg == nil {
		return invalid("config", "is required")
	}
	if err := validateObjectName("config.metadata.name", cfg.GetMetadata().GetName()); err != nil {
		return err
	}
	if cfg.GetImage().GetImage() == "" {
		return invalid("config.image.image", "is required")
	}
	for field, v := range map[string]string{
		"config.image.image": cfg.GetImage().GetImage(), "config.log_path": cfg.GetLogPath(), "config.working_dir": cfg.GetWorkingDir(),
	} {
		if err := noNUL(field, v); err != nil {
			return err
		}
	}
	if wd := cfg.GetWorkingDir(); wd != "" {
		if err := validPath("config.working_dir", wd); err != nil {
			return err
		}
	}
	if err := validateProcess(cfg); err != nil {
		return err
	}
	if err := validateMounts(cfg.GetMounts()); err != nil {
		return err
	}
	if err := validateDevices(cfg.GetDevices()); err != nil {
		return err
	}
	linux := cfg.GetLinux()
	sc := linux.GetSecurityContext()
	if err := validateIDs("config.linux.security_context", sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups()); err != nil {
		return err
	}
	if err := validateCapabilities(sc.GetCapabilities()); err != nil {
		return err
	}
	if err := validateProcPaths(sc); err != nil {
		return err
	}
	return validateContainerResources("config.linux.resources", linux.GetResources(), node)
}

// validateProcess: the kernel ends arguments and environment strings at NUL, an
// environment name cannot hold '=', and a stop signal is one of the CRI's enum.
func validateProcess(cfg *runtimeapi.ContainerConfig) error {
	if _, err := container.StopSignalName(cfg.GetStopSignal()); err != nil {
		return invalid("config.stop_signal", "%v", err)
	}
	for name, list := range map[string][]string{"command": cfg.GetCommand(), "args": cfg.GetArgs()} {
		for i, a := range list {
			if err := noNUL(fmt.Sprintf("config.%s[%d]", name, i), a); err != nil {
				return err
			}
		}
	}
	for i, kv := range cfg.GetEnvs() {
		field := fmt.Sprintf("config.envs[%d]", i)
		if k := kv.GetKey(); k == "" || strings.ContainsAny(k, "=\x00") {
			return invalid(field+".key", "%s is not an environment variable name", quote(k))
		}
		if err := noNUL(field+".value", string(kv.GetValue())); err != nil {
			return err
		}
	}
	return nil
}

// validateMounts: paths absolute, without '..' or NUL; no mount over "/" or into /proc
// (runc refuses both at start).
func validateMounts(mounts []*runtimeapi.Mount) error {
	for i, m := range mounts {
		field := fmt.Sprintf("config.mounts[%d]", i)
		dst := m.GetContainerPath()
		if err := noNUL(field+".container_path", dst); err != nil {
			return err
		}
		if !path.IsAbs(dst) || hasDotDot(dst) {
			return invalid(field+".container_path", "%s must be absolute without '..'", quote(dst))
		}
		if err := validPath(field+".container_path", dst); err != nil {
			return err
		}
		switch clean := path.Clean(dst); {
		case clean == "/":
			return invalid(field+".container_path", "cannot mount over the container's root")
		case (clean == "/proc" || strings.HasPrefix(clean, "/proc/")) && !slices.Contains(procBindTargets, clean):
			return invalid(field+".container_path", "%s is inside /proc, where the runtime refuses mounts", quote(dst))
		}
		for j, o := range m.GetMountOptions() {
			if err := spec.CheckMountOption(o); err != nil {
				return invalid(fmt.Sprintf("%s.mount_options[%d]", field, j), "%v", err)
			}
		}
		hp := m.GetHostPath()
		if err := noNUL(field+".host_path", hp); err != nil {
			return err
		}
		if hp != "" && (!path.IsAbs(hp) || hasDotDot(hp)) {
			return invalid(field+".host_path", "%s must be absolute without '..'", quote(hp))
		}
		if hp != "" {
			if err := validPath(field+".host_path", hp); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateDevices(devs []*runtimeapi.Device) error {
	for i, d := range devs {
		field := fmt.Sprintf("config.devices[%d]", i)
		for name, p := range map[string]string{"host_path": d.GetHostPath(), "container_path": d.GetContainerPath()} {
			if err := noNUL(field+"."+name, p); err != nil {
				return err
			}
			if p == "" {
				continue
			}
			if !path.IsAbs(p) || hasDotDot(p) {
				return invalid(field+"."+name, "%s must be absolute without '..'", quote(p))
			}
			if err := validPath(field+"."+name, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// Linux's limits on a path (PATH_MAX, with its NUL) and on one name in it (NAME_MAX).
const (
	maxPathLen     = 4095
	maxPathNameLen = 255
)

// validPath: an absolute path without NUL that the kernel can look up (runc
// fails with ENAMETOOLONG on a longer one).
func validPath(field, p string) error {
	if err := noNUL(field, p); err != nil {
		return err
	}
	if !path.IsAbs(p) {
		return invalid(field, "%s must be absolute", quote(p))
	}
	if len(p) > maxPathLen {
		return invalid(field, "%s is longer than %d bytes", quote(p), maxPathLen)
	}
	for _, name := range strings.Split(p, "/") {
		if len(name) > maxPathNameLen {
			return invalid(field, "%s has a name longer than %d bytes", quote(p), maxPathNameLen)
		}
	}
	return nil
}

// validateProcPaths: the masked and read-only paths are absolute container paths
// (the OCI spec says so; runc opens them after entering the rootfs and fails on a NUL,
// EINVAL, or on a name too long). Whether a path crosses a file of the image is
// judged against the rootfs (container/create_checks.go).
func validateProcPaths(sc *runtimeapi.LinuxContainerSecurityContext) error {
	const field = "config.linux.security_context"
	for name, list := range map[string][]string{"masked_paths": sc.GetMaskedPaths(), "readonly_paths": sc.GetReadonlyPaths()} {
		for i, p := range list {
			if err := validPath(fmt.Sprintf("%s.%s[%d]", field, name, i), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateCapabilities accepts the kernel's capability names, with or without CAP_,
// in any case, and ALL (not for ambient).
func validateCapabilities(c *runtimeapi.Capability) error {
	const field = "config.linux.security_context.capabilities"
	for name, list := range map[string][]string{
		"add_capabilities": c.GetAddCapabilities(), "drop_capabilities": c.GetDropCapabilities(),
		"add_ambient_capabilities": c.GetAddAmbientCapabilities(),
	} {
		for i, n := range list {
			u := strings.ToUpper(n)
			if u == "ALL" && name != "add_ambient_capabilities" {
				continue
			}
			if !strings.HasPrefix(u, "CAP_") {
				u = "CAP_" + u
			}
			if !slices.Contains(cap.Known(), u) {
				return invalid(fmt.Sprintf("%s.%s[%d]", field, name, i), "%s is not a capability", quote(n))
			}
		}
	}
	return nil
}
