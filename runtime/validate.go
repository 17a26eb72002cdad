package runtime

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Requests are validated before anything is created; a request the runtime is sure
// to refuse later is refused here with InvalidArgument naming the field:
//
//	validate_sandbox.go    RunPodSandbox's config (names, paths, DNS, ports, sysctls)
//	validate_container.go  CreateContainer's config (names, paths, mounts, masked paths, capabilities)
//	validate_resources.go  cgroup resources, shared with UpdateContainerResources
//	spec/unified.go        unified (cgroup v2) keys and values, shared with the spec builder
//	validate_names.go      Kubernetes object name rules
//	validate_sysctl.go     sysctl names and their kernel namespaces
//
// What needs the host or the image's files (a mount's host path, a working directory
// that is a file of the image) is checked by the container manager at create, before
// the container exists: container/create_checks.go.

// invalid is an InvalidArgument error naming the field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// quote quotes a value for an error message, cut to 64 bytes: a request may send
// megabytes.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		return strconv.Quote(v[:max]) + "..."
	}
	return strconv.Quote(v)
}

// validateID rejects an empty id, and one no store could hold.
func validateID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if len(id) > 1024 || strings.ContainsRune(id, 0) {
		return invalid(field, "%s is not an id", quote(id))
	}
	return nil
}

// noNUL rejects a string with a NUL byte: the kernel cuts paths and arguments there.
func noNUL(field, v string) error {
	if strings.ContainsRune(v, 0) {
		return invalid(field, "%s holds a NUL byte", quote(v))
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
		// With the node's network too (user_namespaces_host_network): the pause
		// container makes the user namespace, the containers join it, and /sys is
		// the host's, bound read-only (spec/mounts.go).
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
