package runtime

import (
	"regexp"
	"sort"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// sysctlNameRE is the kubelet's rule for a sysctl name (k8s.io/apimachinery
// validation: segments of [a-z0-9_-] joined by '.' or '/'), at most 253 characters.
var sysctlNameRE = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

const maxSysctlNameLen = 253

// sysctlNamespace is the kernel namespace a sysctl belongs to ("ipc", "net"), or ""
// when it is not namespaced (k8s.io/component-helpers/node/util/sysctl): runc refuses
// those, and those of a namespace the pod shares with the node.
func sysctlNamespace(name string) string {
	switch name {
	case "kernel.sem", "kernel.shmall", "kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced",
		"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni":
		return "ipc"
	}
	switch {
	case strings.HasPrefix(name, "fs.mqueue."):
		return "ipc"
	case strings.HasPrefix(name, "net."):
		return "net"
	}
	return ""
}

// validateSysctls checks each sysctl's name and that it lives in a namespace of
// the pod's own, naming the key; the runtime would fail the pod otherwise.
func validateSysctls(linux *runtimeapi.LinuxPodSandboxConfig) error {
	const field = "config.linux.sysctls"
	sysctls := linux.GetSysctls()
	keys := make([]string, 0, len(sysctls))
	for k := range sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same key is named for the same request
	ns := linux.GetSecurityContext().GetNamespaceOptions()
	for _, k := range keys {
		f := field + "[" + quote(k) + "]"
		if len(k) > maxSysctlNameLen || !sysctlNameRE.MatchString(k) {
			return invalid(f, "is not a valid sysctl name")
		}
		// '+' and '=' let a value smuggle a second key=value pair into what a runtime
		// writes (CRI-O's CVE-2022-0811 set the host's kernel.core_pattern so); no
		// namespaced sysctl takes them.
		if v := sysctls[k]; strings.ContainsAny(v, "\x00\n+=") {
			return invalid(f, "the value %q holds a NUL, newline, '+' or '='", v)
		}
		name := pod.NormalizeSysctlName(k)
		switch sysctlNamespace(name) {
		case "ipc":
			if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
				return invalid(f, "%s is in the IPC namespace, which the pod shares with the node", name)
			}
		case "net":
			if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE {
				return invalid(f, "%s is in the network namespace, which the pod shares with the node", name)
			}
		default:
			return invalid(f, "%s is not in a namespace of the pod (only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.* are)", name)
		}
	}
	return nil
}
