package pod

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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

// SysctlPath is the /proc/sys file of a dotted sysctl name: '.' separates, a '/' is
// a dot inside a segment.
func SysctlPath(name string) string { return "/proc/sys/" + swapDotsSlashes(name) }

// The sysctls a pod gets without asking, as containerd 2.x's CRI plugin gives them
// (its enable_unprivileged_ports and enable_unprivileged_icmp, both on by default).
const (
	// UnprivilegedPortStart = 0 lets any user bind every port in the pod's network
	// namespace, so a non-root process may listen on 80 without CAP_NET_BIND_SERVICE.
	UnprivilegedPortStart = "net.ipv4.ip_unprivileged_port_start"
	// PingGroupRange "0 2147483647" lets every group open ICMP echo sockets (ping
	// without CAP_NET_RAW).
	PingGroupRange = "net.ipv4.ping_group_range"
	allGroups      = "0 2147483647"
)

// SysctlDefaults says which of those sysctls a runtime gives pods.
type SysctlDefaults struct {
	UnprivilegedPorts bool
	UnprivilegedICMP  bool
	// InUserNS: the runtime itself runs in a user namespace, where group ids outside
	// its mapping cannot go into ping_group_range: no ICMP default then.
	InUserNS bool
}

// Sysctls are a pod's sysctls: its config's, with dotted names, and d's defaults
// for a pod with a network namespace of its own that does not set them; the ICMP
// default not for a pod with a user namespace of its own, whose group ids it would
// not map. nil when there are none.
func Sysctls(cfg *runtimeapi.PodSandboxConfig, d SysctlDefaults) map[string]string {
	out := map[string]string{}
	for k, v := range cfg.GetLinux().GetSysctls() {
		out[NormalizeSysctlName(k)] = v
	}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		if _, set := out[UnprivilegedPortStart]; d.UnprivilegedPorts && !set {
			out[UnprivilegedPortStart] = "0"
		}
		if _, set := out[PingGroupRange]; d.UnprivilegedICMP && !set && !d.InUserNS && UserNamespace(cfg) == nil {
			out[PingGroupRange] = allGroups
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
