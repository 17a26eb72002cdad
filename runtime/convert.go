package runtime

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/sandbox"
)

func toSandboxState(st sandbox.State) runtimeapi.PodSandboxState {
	if st == sandbox.StateReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

func toSandbox(sb *sandbox.Sandbox) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             sb.ID,
		Metadata:       sb.Config.GetMetadata(),
		State:          toSandboxState(sb.State()),
		CreatedAt:      sb.CreatedAt.UnixNano(),
		Labels:         sb.Config.GetLabels(),
		Annotations:    sb.Config.GetAnnotations(),
		RuntimeHandler: sb.RuntimeHandler,
	}
}

func toSandboxStatus(sb *sandbox.Sandbox) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.ID,
		Metadata:       sb.Config.GetMetadata(),
		State:          toSandboxState(sb.State()),
		CreatedAt:      sb.CreatedAt.UnixNano(),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         sb.Config.GetLabels(),
		Annotations:    sb.Config.GetAnnotations(),
		RuntimeHandler: sb.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: namespaceOptions(sb.Config),
		}},
	}
	if len(sb.IPs) > 0 {
		st.Network.Ip = sb.IPs[0]
		for _, ip := range sb.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

// namespaceOptions reports the pod's namespace modes; CONTAINER for an unset pid mode
// is reported as POD, as the kubelet reads it.
func namespaceOptions(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.NamespaceOption {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	return &runtimeapi.NamespaceOption{
		Network:       ns.GetNetwork(),
		Pid:           ns.GetPid(),
		Ipc:           ns.GetIpc(),
		TargetId:      ns.GetTargetId(),
		UsernsOptions: ns.GetUsernsOptions(),
	}
}

func toContainer(c *Container, st containerStatus) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: c.ID, PodSandboxId: c.SandboxID, Metadata: c.Config.GetMetadata(),
		Image: &runtimeapi.ImageSpec{Image: c.ImageID, UserSpecifiedImage: c.ImageName}, ImageRef: c.ImageRef, ImageId: c.ImageID,
		State: st.State, CreatedAt: c.CreatedAt.UnixNano(),
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
	}
}

func toContainerStatus(c *Container, st containerStatus) *runtimeapi.ContainerStatus {
	out := &runtimeapi.ContainerStatus{
		Id: c.ID, Metadata: c.Config.GetMetadata(), State: st.State, CreatedAt: c.CreatedAt.UnixNano(),
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, ExitCode: st.ExitCode,
		Image:    &runtimeapi.ImageSpec{Image: c.ImageID, UserSpecifiedImage: c.ImageName},
		ImageRef: c.ImageRef, ImageId: c.ImageID, Reason: st.Reason, Message: st.Message,
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
		Mounts: c.Config.GetMounts(), LogPath: c.LogPath,
		Resources: &runtimeapi.ContainerResources{Linux: c.Resources()},
	}
	user := &runtimeapi.LinuxContainerUser{Uid: int64(c.User.UID), Gid: int64(c.User.GID)}
	for _, g := range c.User.AdditionalGIDs {
		user.SupplementalGroups = append(user.SupplementalGroups, int64(g))
	}
	out.User = &runtimeapi.ContainerUser{Linux: user}
	return out
}
