package container

import (
	"context"
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus reports one container.
func (s *Manager) Status(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.containers.get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	st := c.Status()
	resp := &runtimeapi.ContainerStatusResponse{Status: toContainerStatus(c, st)}
	if req.GetVerbose() {
		info, err := json.Marshal(map[string]any{
			"sandboxID": c.SandboxID, "pid": st.Pid, "config": c.Config, "logPath": c.LogPath,
			"snapshotter": c.Snapshotter, "imageID": c.ImageID,
		})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// StatusesOf reports every container of a pod, newest first: the containers_statuses
// of PodSandboxStatus, which spare an evented-PLEG kubelet a ContainerStatus call per
// container. The order matters: the kubelet takes them as given, and the first
// status of a container name is the one it believes is the latest attempt (its own
// fallback path sorts newest first); oldest first, it creates an attempt that exists.
func (s *Manager) StatusesOf(podID string) []*runtimeapi.ContainerStatus {
	cs := s.containers.inSandbox(podID)
	out := make([]*runtimeapi.ContainerStatus, 0, len(cs))
	for i := len(cs) - 1; i >= 0; i-- {
		out = append(out, toContainerStatus(cs[i], cs[i].Status()))
	}
	return out
}
