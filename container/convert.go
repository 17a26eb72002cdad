package container

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Conversions of containers to CRI messages.

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
		Resources:  &runtimeapi.ContainerResources{Linux: c.Resources()},
		StopSignal: criStopSignal(c.Config, c.StopSignal),
	}
	user := &runtimeapi.LinuxContainerUser{Uid: int64(c.User.UID), Gid: int64(c.User.GID)}
	for _, g := range c.User.AdditionalGIDs {
		user.SupplementalGroups = append(user.SupplementalGroups, int64(g))
	}
	out.User = &runtimeapi.ContainerUser{Linux: user}
	return out
}
