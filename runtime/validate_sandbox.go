package runtime

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxHostnameLen is the kernel's limit (HOST_NAME_MAX).
const maxHostnameLen = 64

// validateSandboxConfig rejects a PodSandboxConfig shimd cannot run, naming the field.
func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return invalid("config", "is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return invalid("config.metadata", "is required")
	}
	if err := validateObjectName("config.metadata.name", md.GetName()); err != nil {
		return err
	}
	if err := validateNamespaceName("config.metadata.namespace", md.GetNamespace()); err != nil {
		return err
	}
	if err := validateUID("config.metadata.uid", md.GetUid()); err != nil {
		return err
	}
	// The hostname is written to the pod's /etc/hostname and /etc/hosts.
	if h := cfg.GetHostname(); h != "" && (len(h) > maxHostnameLen || !dnsSubdomainRE.MatchString(h)) {
		return invalid("config.hostname", "%s is not a valid hostname", quote(h))
	}
	if err := noNUL("config.log_directory", cfg.GetLogDirectory()); err != nil {
		return err
	}
	if d := cfg.GetLogDirectory(); d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d) {
		return invalid("config.log_directory", "%s must be a clean absolute path", quote(d))
	}
	if err := validateDNS(cfg.GetDnsConfig()); err != nil {
		return err
	}
	if err := validatePortMappings(cfg.GetPortMappings()); err != nil {
		return err
	}
	return validateLinuxSandbox(cfg.GetLinux())
}

// validateCgroupParent holds a pod's cgroup parent to the form of shimd's cgroup
// driver, as the kubelet spells it for that driver: a systemd slice name
// ("kubepods-burstable-pod<uid>.slice") under systemd, a path that names no slice
// under cgroupfs. Else runc would get a cgroupfs directory inside systemd's tree, or
// a systemd cgroupsPath it fails on at start; the kubelet's cgroupDriver must match
// the one RuntimeConfig reports. As CRI-O's cgroup managers refuse them.
func validateCgroupParent(parent, driver string) error {
	if parent == "" {
		return nil
	}
	slice := strings.HasSuffix(filepath.Base(parent), ".slice")
	switch {
	case driver == "systemd" && !slice:
		return invalid("config.linux.cgroup_parent", "%s is no systemd slice, and shimd's cgroup_driver is systemd: the kubelet's cgroupDriver must be systemd too", quote(parent))
	case driver != "systemd" && slice:
		return invalid("config.linux.cgroup_parent", "%s is a systemd slice, and shimd's cgroup_driver is cgroupfs: the kubelet's cgroupDriver must be cgroupfs too", quote(parent))
	}
	return nil
}

func validateLinuxSandbox(linux *runtimeapi.LinuxPodSandboxConfig) error {
	if p := linux.GetCgroupParent(); strings.Contains(p, "..") || strings.ContainsRune(p, 0) {
		return invalid("config.linux.cgroup_parent", "%s must not contain '..' or NUL", quote(p))
	}
	sc := linux.GetSecurityContext()
	if err := validateIDs("config.linux.security_context", sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups()); err != nil {
		return err
	}
	if err := validateUserns(sc.GetNamespaceOptions()); err != nil {
		return err
	}
	for name, r := range map[string]*runtimeapi.LinuxContainerResources{"overhead": linux.GetOverhead(), "resources": linux.GetResources()} {
		if err := validateResourceValues("config.linux."+name, r); err != nil {
			return err
		}
	}
	return validateSysctls(linux)
}

// validateDNS: the DNS config is written line by line to the pod's resolv.conf, so no
// entry may hold white space (a newline would add lines of its own); servers are IPs.
func validateDNS(dns *runtimeapi.DNSConfig) error {
	for i, s := range dns.GetServers() {
		if net.ParseIP(s) == nil {
			return invalid(fmt.Sprintf("config.dns_config.servers[%d]", i), "%s is not an IP address", quote(s))
		}
	}
	for name, list := range map[string][]string{"searches": dns.GetSearches(), "options": dns.GetOptions()} {
		for i, v := range list {
			if v == "" || strings.ContainsAny(v, " \t\r\n\x00") {
				return invalid(fmt.Sprintf("config.dns_config.%s[%d]", name, i), "%s must be one word", quote(v))
			}
		}
	}
	return nil
}

func validatePortMappings(pms []*runtimeapi.PortMapping) error {
	for i, pm := range pms {
		field := fmt.Sprintf("config.port_mappings[%d]", i)
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 {
			return invalid(field+".container_port", "%d is out of range 1-65535", pm.GetContainerPort())
		}
		if pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return invalid(field+".host_port", "%d is out of range 0-65535", pm.GetHostPort())
		}
		if ip := pm.GetHostIp(); ip != "" && net.ParseIP(ip) == nil {
			return invalid(field+".host_ip", "%s is not an IP address", quote(ip))
		}
		if _, ok := runtimeapi.Protocol_name[int32(pm.GetProtocol())]; !ok {
			return invalid(field+".protocol", "unknown protocol %d", pm.GetProtocol())
		}
	}
	return nil
}

// validateIDs rejects negative or too large user and group ids.
func validateIDs(field string, user, group *runtimeapi.Int64Value, groups []int64) error {
	const maxID = 1<<32 - 2 // (uid_t)-1 means "no change" to the kernel
	check := func(f string, v int64) error {
		if v < 0 || v > maxID {
			return invalid(field+"."+f, "%d is not a user or group id", v)
		}
		return nil
	}
	if user != nil {
		if err := check("run_as_user", user.GetValue()); err != nil {
			return err
		}
	}
	if group != nil {
		if err := check("run_as_group", group.GetValue()); err != nil {
			return err
		}
	}
	for i, g := range groups {
		if err := check(fmt.Sprintf("supplemental_groups[%d]", i), g); err != nil {
			return err
		}
	}
	return nil
}
