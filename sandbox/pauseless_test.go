package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

func TestPauseless(t *testing.T) {
	own := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	cfgOf := func(ns *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}}}
	}
	runc := pod.Handler{PauseOptional: true}
	userns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
	tests := []struct {
		name     string
		whenNeed bool
		cfg      *runtimeapi.PodSandboxConfig
		rt       pod.Handler
		want     bool
	}{
		{"always mode", false, cfgOf(own), runc, false},
		{"own PID namespaces on runc", true, cfgOf(own), runc, true},
		{"host PID namespace", true, cfgOf(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}), runc, true},
		{"host network and IPC", true, cfgOf(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER,
			Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}), runc, true},
		{"shared PID namespace (the CRI's zero value)", true, cfgOf(nil), runc, false},
		{"shared PID namespace", true, cfgOf(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}), runc, false},
		{"own user namespace", true, cfgOf(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, UsernsOptions: userns}), runc, false},
		{"sandboxed runtime", true, cfgOf(own), pod.Handler{}, false},
		{"gVisor", true, cfgOf(own), pod.Handler{PauseOptional: true, Dialer: &network.Runsc{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManager(Options{PauseWhenNeeded: tt.whenNeed, StateDir: "/run/shimd"})
			require.Equal(t, tt.want, m.pauseless(tt.cfg, tt.rt))
		})
	}
}

func TestPinPaths(t *testing.T) {
	m := NewManager(Options{StateDir: "/run/shimd"})
	sb := &Sandbox{ID: "sb1", Pauseless: true, Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}}}}
	m.fs.setPinPaths(sb)
	require.Equal(t, "", sb.IPCNSPath, "host IPC: nothing pinned")
	require.Equal(t, "/run/shimd/utsns/sb1", sb.UTSNSPath)
	// Not pinned, not READY: a pause-less pod whose pins are gone.
	sb.state = pod.Ready
	require.Equal(t, pod.NotReady, sb.State())
}
