package pod

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestHostPIDOrIPC(t *testing.T) {
	cfg := func(pid, ipc runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: pid, Ipc: ipc}}}}
	}
	if HostPIDOrIPC(&runtimeapi.PodSandboxConfig{}) || HostPIDOrIPC(cfg(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD)) {
		t.Fatal("a pod of its own namespaces")
	}
	if !HostPIDOrIPC(cfg(runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_POD)) || !HostPIDOrIPC(cfg(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_NODE)) {
		t.Fatal("host PID or IPC")
	}
}
