package pod

import (
	"testing"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNormalizeSysctlName(t *testing.T) {
	for in, want := range map[string]string{
		"net.ipv4.ip_forward":              "net.ipv4.ip_forward",
		"net/ipv4/ip_forward":              "net.ipv4.ip_forward",
		"net/ipv4/conf/eno2.100/rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"net.ipv4.conf.eno2/100.rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"kernel":                           "kernel",
	} {
		if got := NormalizeSysctlName(in); got != want {
			t.Errorf("NormalizeSysctlName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSysctlPath(t *testing.T) {
	if got := SysctlPath("net.ipv4.conf.eno2/100.rp_filter"); got != "/proc/sys/net/ipv4/conf/eno2.100/rp_filter" {
		t.Fatalf("got %q", got)
	}
}

// TestSysctls: the defaults go only to pods with a network namespace of their own
// that do not set them; the ICMP one not to pods with a user namespace, nor when the
// runtime runs in one; the config's names come out dotted.
func TestSysctls(t *testing.T) {
	both := SysctlDefaults{UnprivilegedPorts: true, UnprivilegedICMP: true}
	nsOpts := func(net runtimeapi.NamespaceMode, userns bool) *runtimeapi.NamespaceOption {
		o := &runtimeapi.NamespaceOption{Network: net}
		if userns {
			o.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
		}
		return o
	}
	cfg := func(sysctls map[string]string, ns *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{Sysctls: sysctls,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}}}
	}
	for _, tc := range []struct {
		name string
		cfg  *runtimeapi.PodSandboxConfig
		d    SysctlDefaults
		want map[string]string
	}{
		{"defaults", cfg(nil, nil), both, map[string]string{UnprivilegedPortStart: "0", PingGroupRange: "0 2147483647"}},
		{"no config at all", &runtimeapi.PodSandboxConfig{}, both, map[string]string{UnprivilegedPortStart: "0", PingGroupRange: "0 2147483647"}},
		{"the pod's own values stay", cfg(map[string]string{"net/ipv4/ip_unprivileged_port_start": "1024", PingGroupRange: "1 1", "kernel.shm_rmid_forced": "1"}, nil), both,
			map[string]string{UnprivilegedPortStart: "1024", PingGroupRange: "1 1", "kernel.shm_rmid_forced": "1"}},
		{"host network: none", cfg(map[string]string{"kernel.shm_rmid_forced": "1"}, nsOpts(runtimeapi.NamespaceMode_NODE, false)), both,
			map[string]string{"kernel.shm_rmid_forced": "1"}},
		{"host network and no sysctls: nil", cfg(nil, nsOpts(runtimeapi.NamespaceMode_NODE, false)), both, nil},
		{"user namespace: no ICMP", cfg(nil, nsOpts(runtimeapi.NamespaceMode_POD, true)), both, map[string]string{UnprivilegedPortStart: "0"}},
		{"runtime in a user namespace: no ICMP", cfg(nil, nil), SysctlDefaults{UnprivilegedPorts: true, UnprivilegedICMP: true, InUserNS: true},
			map[string]string{UnprivilegedPortStart: "0"}},
		{"ports only", cfg(nil, nil), SysctlDefaults{UnprivilegedPorts: true}, map[string]string{UnprivilegedPortStart: "0"}},
		{"off", cfg(map[string]string{"net.core.somaxconn": "1024"}, nil), SysctlDefaults{}, map[string]string{"net.core.somaxconn": "1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Sysctls(tc.cfg, tc.d))
		})
	}
}
