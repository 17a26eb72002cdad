package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/pod"
)

func validConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}}
}

func TestValidateSandboxConfig(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig
		field  string // "" means valid
	}{
		{name: "valid", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return c }},
		{name: "nil config", mutate: func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return nil }, field: "config"},
		{name: "no metadata", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata = nil; return c }, field: "config.metadata"},
		{name: "no name", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = ""; return c }, field: "config.metadata.name"},
		{name: "no namespace", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Namespace = ""; return c }, field: "config.metadata.namespace"},
		{name: "no uid", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Uid = ""; return c }, field: "config.metadata.uid"},
		{name: "underscore in name", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = "a_b"; return c }, field: "config.metadata.name"},
		{name: "nul in log dir", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.LogDirectory = "/var/log/a\x00b"
			return c
		}, field: "config.log_directory"},
		{name: "hostname with newline", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Hostname = "a\n1.2.3.4 evil"
			return c
		}, field: "config.hostname"},
		{name: "dns search with newline", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.DnsConfig = &runtimeapi.DNSConfig{Searches: []string{"a\nnameserver 10.0.0.1"}}
			return c
		}, field: "config.dns_config.searches[0]"},
		{name: "dns server not an ip", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"dns.example"}}
			return c
		}, field: "config.dns_config.servers[0]"},
		{name: "negative run_as_user", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: -1}}}
			return c
		}, field: "config.linux.security_context.run_as_user"},
		{name: "negative overhead memory", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{Overhead: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -5}}
			return c
		}, field: "config.linux.overhead.memory_limit_in_bytes"},
		{name: "unknown protocol", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, Protocol: 7}}
			return c
		}, field: "config.port_mappings[0].protocol"},
		{name: "relative log dir", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.LogDirectory = "logs"; return c }, field: "config.log_directory"},
		{name: "log dir escape", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.LogDirectory = "/var/log/../etc"
			return c
		}, field: "config.log_directory"},
		{name: "cgroup parent escape", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/../x"}
			return c
		}, field: "config.linux.cgroup_parent"},
		{name: "bad port", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 0}}
			return c
		}, field: "config.port_mappings[0].container_port"},
		{name: "bad host ip", mutate: func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080, HostIp: "nope"}}
			return c
		}, field: "config.port_mappings[0].host_ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateSandboxConfig(tt.mutate(validConfig()))
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			require.ErrorContains(t, err, tt.field+":")
		})
	}
}

func TestSandboxMatches(t *testing.T) {
	sb := pod.Pod{ID: "abcdef", CreatedAt: time.Now(), State: pod.Ready, Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p"}, Labels: map[string]string{"app": "web", "tier": "fe"}}}
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	notReady := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	tests := []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   bool
	}{
		{"nil filter", nil, true},
		{"id prefix", &runtimeapi.PodSandboxFilter{Id: "abc"}, true},
		{"other id", &runtimeapi.PodSandboxFilter{Id: "abd"}, false},
		{"state ready", &runtimeapi.PodSandboxFilter{State: ready}, true},
		{"state notready", &runtimeapi.PodSandboxFilter{State: notReady}, false},
		{"labels subset", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}, true},
		{"label value differs", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "db"}}, false},
		{"label missing", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"zone": "a"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, sandboxMatches(sb, tt.filter))
		})
	}
}

// Pod metadata reaches CNI_ARGS ("K8S_POD_NAME=x;IP=..."), so ';' and '=' and all
// else outside the Kubernetes name rules are refused; critest's names (upper case,
// uuids) and the kubelet's pass.
func TestValidatePodMetadata(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name, podName, namespace, uid string
		field                         string // "" means valid
	}{
		{"kubelet", "web-0", "default", "0b6c4e62-2b8b-4c5a-9d5e-3f1a2b3c4d5e", ""},
		{"critest", "PodSandbox-for-creating-performance-test-0b6c4e62-2b8b-4c5a-9d5e-3f1a2b3c4d5e",
			"cri-test-namespace0b6c4e62-2b8b-4c5a-9d5e-3f1a2b3c4d5e", "cri-test-uid0b6c4e62-2b8b-4c5a-9d5e-3f1a2b3c4d5e", ""},
		{"static pod", "kube-apiserver-node1.example.com", "kube-system", "6a3f0e7c9b1d2e4f", ""},
		{"longest name", long(253), "a", "u", ""},
		{"longest namespace", "a", long(63), "u", ""},
		{"name injection", "x;IP=198.19.77.250", "default", "u", "config.metadata.name"},
		{"namespace injection", "web", "x;IP=198.19.77.250", "u", "config.metadata.namespace"},
		{"uid injection", "web", "default", "x;IP=198.19.77.250", "config.metadata.uid"},
		{"equals", "a=b", "default", "u", "config.metadata.name"},
		{"name too long", long(254), "default", "u", "config.metadata.name"},
		{"namespace too long", "a", long(64), "u", "config.metadata.namespace"},
		{"dot in namespace", "a", "kube.system", "u", "config.metadata.namespace"},
		{"leading dash", "-a", "default", "u", "config.metadata.name"},
		{"trailing dot", "a.", "default", "u", "config.metadata.name"},
		{"space", "a b", "default", "u", "config.metadata.name"},
		{"nul", "a\x00b", "default", "u", "config.metadata.name"},
		{"newline uid", "a", "default", "u\nv", "config.metadata.uid"},
		{"slash uid", "a", "default", "u/v", "config.metadata.uid"},
		{"unicode", "pödd", "default", "u", "config.metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Metadata = &runtimeapi.PodSandboxMetadata{Name: tt.podName, Namespace: tt.namespace, Uid: tt.uid}
			err := validateSandboxConfig(cfg)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			require.ErrorContains(t, err, tt.field+":")
		})
	}
}

func TestValidateSysctls(t *testing.T) {
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	hostIPC := &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}
	tests := []struct {
		name  string
		key   string
		ns    *runtimeapi.NamespaceOption
		valid bool
	}{
		{"shm", "kernel.shm_rmid_forced", nil, true},
		{"msg", "kernel.msgmax", nil, true},
		{"sem", "kernel.sem", nil, true},
		{"mqueue", "fs.mqueue.msg_max", nil, true},
		{"net", "net.ipv4.ip_forward", nil, true},
		{"net slashes", "net/ipv4/conf/eno2.100/rp_filter", nil, true},
		{"net dashes", "net.ipv4.conf.br-1.forwarding", nil, true},
		{"leading dash", "-10", nil, false},
		{"leading dot", ".dev.mem1", nil, false},
		{"not namespaced", "vm.overcommit_memory", nil, false},
		{"kernel not ipc", "kernel.panic", nil, false},
		{"hostname", "kernel.hostname", nil, false},
		{"upper case", "net.IPv4.ip_forward", nil, false},
		{"double dot", "net..ipv4", nil, false},
		{"space", "net.ipv4 .x", nil, false},
		{"empty", "", nil, false},
		{"too long", "net." + strings.Repeat("a", 250), nil, false},
		{"net with host network", "net.ipv4.ip_forward", hostNet, false},
		{"ipc with host ipc", "kernel.shmmax", hostIPC, false},
		{"mqueue with host ipc", "fs.mqueue.msg_max", hostIPC, false},
		{"ipc with host network", "kernel.shmmax", hostNet, true},
		{"net with host ipc", "net.core.somaxconn", hostIPC, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{tt.key: "1"},
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: tt.ns}}
			err := validateSandboxConfig(cfg)
			if tt.valid {
				require.NoError(t, err)
				return
			}
			require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			require.ErrorContains(t, err, "config.linux.sysctls["+quote(tt.key)+"]")
		})
	}
}

// A value may not smuggle a second key (CVE-2022-0811); ordinary values pass.
func TestValidateSysctlValues(t *testing.T) {
	for v, valid := range map[string]bool{
		"1": true, "1024 65535": true, "0 2147483647": true, "cubic": true,
		"1+kernel.core_pattern=|/x": false, "1 kernel.core_pattern=|/x": false, "+": false, "a=b": false,
		"1\nkernel.core_pattern": false, "1\x00": false,
	} {
		cfg := validConfig()
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.ipv4.ip_local_port_range": v}}
		err := validateSandboxConfig(cfg)
		if valid {
			require.NoError(t, err, "%q", v)
			continue
		}
		require.True(t, errdefs.IsInvalidArgument(err), "%q: %v", v, err)
		require.ErrorContains(t, err, "config.linux.sysctls")
	}
}

// A pod's cgroup parent must be of the form of shimd's cgroup driver, checked at
// RunPodSandbox before the sandbox manager is asked for anything.
func TestCgroupParentFollowsTheDriver(t *testing.T) {
	for _, tc := range []struct {
		driver, parent string
		ok             bool
	}{
		{"systemd", "kubepods-burstable-podu_1.slice", true},
		{"systemd", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice", true},
		{"systemd", "", true},
		{"systemd", "/kubepods/burstable/podu-1", false},
		{"systemd", "kubepods-burstable-podu_1.scope", false},
		{"cgroupfs", "/kubepods/burstable/podu-1", true},
		{"cgroupfs", "", true},
		{"cgroupfs", "kubepods-burstable-podu_1.slice", false},
		{"", "/kubepods.slice/kubepods-podu.slice", false}, // the default driver is cgroupfs
	} {
		t.Run(tc.driver+" "+tc.parent, func(t *testing.T) {
			sb := &fakeSandboxes{}
			s := New(Options{Sandboxes: sb, CgroupDriver: tc.driver, Node: v2Node, Containers: container.New(container.Options{Pods: sb, Node: v2Node})})
			cfg := validConfig()
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: tc.parent}
			_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if tc.ok {
				require.NotEmpty(t, sb.calls, "reached the sandbox manager (%v)", err)
				return
			}
			require.Equal(t, codes.InvalidArgument, status.Code(errgrpc.ToGRPC(err)), "%v", err)
			require.ErrorContains(t, err, "config.linux.cgroup_parent: ")
			require.Empty(t, sb.calls, "refused after it reached the sandbox manager")
		})
	}
}
