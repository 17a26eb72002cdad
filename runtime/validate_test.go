package runtime

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/sandbox"
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
	sb := &sandbox.Sandbox{ID: "abcdef", CreatedAt: time.Now(), Config: &runtimeapi.PodSandboxConfig{
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
