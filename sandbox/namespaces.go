package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/shimd/shimd/network"
)

// A pod's namespaces pinned on the host (its network namespace, and the user
// namespace that owns it when the pod has its own), and the pod as CNI sees it.

// netnsDir pins the pods' network namespaces.
func (l layout) netnsDir() string { return filepath.Join(l.state, "netns") }

// usernsDir pins the user namespaces of pods that have their own.
func (l layout) usernsDir() string { return filepath.Join(l.state, "userns") }

// usernsPath is where the user namespace of a pod with its own is pinned, else "".
// It is pinned with the network namespace it owns; a pod on the node's network has
// none, and its pause container makes the user namespace instead.
func (l layout) usernsPath(sb *Sandbox) string {
	if sb.UserNamespace() == nil || sb.NetNSPath == "" {
		return ""
	}
	return filepath.Join(l.usernsDir(), sb.ID)
}

// createNamespaces pins the pod's network namespace, owned by the pod's own user
// namespace (pinned too) when it has one.
func (l layout) createNamespaces(sb *Sandbox) error {
	if sb.NetNSPath == "" {
		return nil
	}
	u := sb.UserNamespace()
	if u == nil {
		return network.CreateNetNS(sb.NetNSPath)
	}
	um, gm := u.GetUids()[0], u.GetGids()[0]
	return network.CreateNetNSInUserns(sb.NetNSPath, l.usernsPath(sb),
		fmt.Sprintf("%d:%d:%d", um.GetContainerId(), um.GetHostId(), um.GetLength()),
		fmt.Sprintf("%d:%d:%d", gm.GetContainerId(), gm.GetHostId(), gm.GetLength()))
}

// removeNamespaces unpins what createNamespaces pinned; missing ones are fine.
func (l layout) removeNamespaces(sb *Sandbox) error {
	var errs []error
	if sb.NetNSPath != "" {
		errs = append(errs, network.RemoveNetNS(sb.NetNSPath))
	}
	if p := l.usernsPath(sb); p != "" {
		errs = append(errs, network.RemoveNetNS(p))
	}
	if sb.Pauseless {
		errs = append(errs, l.removePins(sb.ID))
	}
	return errors.Join(errs...)
}

// attachment describes the pod to CNI.
func attachment(sb *Sandbox) network.Attachment {
	md := sb.Config.GetMetadata()
	a := network.Attachment{
		ID:        sb.ID,
		NetNSPath: sb.NetNSPath,
		Args: [][2]string{
			{"K8S_POD_NAMESPACE", md.GetNamespace()},
			{"K8S_POD_NAME", md.GetName()},
			{"K8S_POD_INFRA_CONTAINER_ID", sb.ID},
			{"K8S_POD_UID", md.GetUid()},
		},
		CgroupPath: sb.Config.GetLinux().GetCgroupParent(),
	}
	for _, pm := range sb.Config.GetPortMappings() {
		if pm.GetHostPort() <= 0 {
			continue
		}
		a.PortMappings = append(a.PortMappings, network.PortMapping{
			HostPort: pm.GetHostPort(), ContainerPort: pm.GetContainerPort(),
			Protocol: strings.ToLower(pm.GetProtocol().String()), HostIP: pm.GetHostIp(),
		})
	}
	a.Bandwidth = bandwidth(sb.Config.GetAnnotations())
	return a
}
