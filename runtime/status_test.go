package runtime

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/container"
)

func TestAppArmorInfo(t *testing.T) {
	type info struct {
		Enabled        bool   `json:"enabled"`
		DefaultProfile string `json:"defaultProfile"`
		Note           string `json:"note"`
	}
	tests := []struct {
		name     string
		node     container.NodeInfo
		want     info
		noteHint string
	}{
		{name: "no AppArmor", want: info{}, noteHint: "no AppArmor"},
		{name: "no parser", node: container.NodeInfo{AppArmor: true}, want: info{Enabled: true}, noteHint: "apparmor_parser"},
		{name: "default profile", node: container.NodeInfo{AppArmor: true, AppArmorDefault: "shimd-default"},
			want: info{Enabled: true, DefaultProfile: "shimd-default"}, noteHint: "privileged ones unconfined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got info
			require.NoError(t, json.Unmarshal([]byte(appArmorInfo(tc.node)), &got))
			require.Contains(t, got.Note, tc.noteHint)
			got.Note = ""
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSELinuxInfo(t *testing.T) {
	tests := []struct {
		name     string
		node     container.SELinuxNode
		enabled  bool
		noteHint string
	}{
		{name: "no SELinux", node: container.SELinuxNode{Configured: true}, noteHint: "no SELinux in the kernel"},
		{name: "not configured", node: container.SELinuxNode{Kernel: true, Enforcing: true}, noteHint: "enable_selinux is false"},
		{name: "no lxc_contexts", node: container.SELinuxNode{Kernel: true, Configured: true}, enabled: true, noteHint: "lxc_contexts"},
		{name: "permissive", node: container.SELinuxNode{Kernel: true, Configured: true, ProcessLabel: "system_u:system_r:container_t"},
			enabled: true, noteHint: "permissive"},
		{name: "on", node: container.SELinuxNode{Kernel: true, Configured: true, Enforcing: true, ProcessLabel: "system_u:system_r:container_t"},
			enabled: true, noteHint: "each pod has its MCS level"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				Enabled, Enforcing bool
				Note               string
			}
			require.NoError(t, json.Unmarshal([]byte(selinuxInfo(tc.node)), &got))
			require.Equal(t, tc.enabled, got.Enabled)
			require.Equal(t, tc.node.Enforcing, got.Enforcing)
			require.Contains(t, got.Note, tc.noteHint)
		})
	}
}
