package runtime

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// invalid is an InvalidArgument error naming the field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// validateSandboxConfig rejects a PodSandboxConfig shimd cannot run, naming the field.
func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return invalid("config", "is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return invalid("config.metadata", "is required")
	}
	for field, v := range map[string]string{"config.metadata.name": md.GetName(), "config.metadata.namespace": md.GetNamespace(), "config.metadata.uid": md.GetUid()} {
		if v == "" {
			return invalid(field, "is required")
		}
		if strings.ContainsAny(v, "_/\x00") {
			return invalid(field, "%q must not contain '_', '/' or NUL", v)
		}
	}
	if h := cfg.GetHostname(); len(h) > 64 || strings.ContainsAny(h, "/ \x00") {
		return invalid("config.hostname", "%q is not a valid hostname", h)
	}
	if d := cfg.GetLogDirectory(); d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d) {
		return invalid("config.log_directory", "%q must be a clean absolute path", d)
	}
	if p := cfg.GetLinux().GetCgroupParent(); p != "" && strings.Contains(p, "..") {
		return invalid("config.linux.cgroup_parent", "%q must not contain '..'", p)
	}
	for i, pm := range cfg.GetPortMappings() {
		field := fmt.Sprintf("config.port_mappings[%d]", i)
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 {
			return invalid(field+".container_port", "%d is out of range 1-65535", pm.GetContainerPort())
		}
		if pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return invalid(field+".host_port", "%d is out of range 0-65535", pm.GetHostPort())
		}
		if ip := pm.GetHostIp(); ip != "" && net.ParseIP(ip) == nil {
			return invalid(field+".host_ip", "%q is not an IP address", ip)
		}
	}
	if err := validateUserns(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); err != nil {
		return err
	}
	for k := range cfg.GetLinux().GetSysctls() {
		if k == "" || strings.ContainsAny(k, " \x00") || strings.Contains(k, "..") {
			return invalid("config.linux.sysctls", "%q is not a sysctl name", k)
		}
	}
	return nil
}

// validateID rejects an empty id.
func validateID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	return nil
}

// validateContainerConfig rejects a ContainerConfig shimd cannot create, naming the field.
func validateContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	if cfg == nil {
		return invalid("config", "is required")
	}
	if cfg.GetMetadata().GetName() == "" {
		return invalid("config.metadata.name", "is required")
	}
	if strings.ContainsAny(cfg.GetMetadata().GetName(), "_/\x00") {
		return invalid("config.metadata.name", "%q must not contain '_', '/' or NUL", cfg.GetMetadata().GetName())
	}
	if cfg.GetImage().GetImage() == "" {
		return invalid("config.image.image", "is required")
	}
	for i, m := range cfg.GetMounts() {
		if !filepath.IsAbs(m.GetContainerPath()) {
			return invalid(fmt.Sprintf("config.mounts[%d].container_path", i), "%q must be absolute", m.GetContainerPath())
		}
		if hp := m.GetHostPath(); hp != "" && (!filepath.IsAbs(hp) || hasDotDot(hp)) {
			return invalid(fmt.Sprintf("config.mounts[%d].host_path", i), "%q must be absolute without '..'", hp)
		}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// validateUserns accepts the node's user namespace (no mappings) or a pod user
// namespace with one uid and one gid mapping starting at container id 0.
func validateUserns(ns *runtimeapi.NamespaceOption) error {
	const field = "config.linux.security_context.namespace_options.userns_options"
	u := ns.GetUsernsOptions()
	if u == nil {
		return nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) != 0 || len(u.GetGids()) != 0 {
			return invalid(field, "mappings given for the node's user namespace")
		}
		return nil
	case runtimeapi.NamespaceMode_POD:
		if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE {
			return invalid(field, "a pod user namespace cannot share the node's network")
		}
	default:
		return invalid(field+".mode", "unsupported mode %s", u.GetMode())
	}
	for name, m := range map[string][]*runtimeapi.IDMapping{"uids": u.GetUids(), "gids": u.GetGids()} {
		if len(m) != 1 {
			return invalid(field+"."+name, "exactly one mapping is supported, got %d", len(m))
		}
		if m[0].GetContainerId() != 0 || m[0].GetLength() < 1 {
			return invalid(field+"."+name, "the mapping must start at container id 0 with a length of at least 1")
		}
	}
	return nil
}
