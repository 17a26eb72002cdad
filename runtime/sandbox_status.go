package runtime

import (
	"context"
	"encoding/json"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus reports one sandbox.
func (s *Service) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.opts.Sandboxes.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	// With the evented PLEG the kubelet takes the pod's container statuses from here,
	// stamped with the time they were read (as containerd answers): without a
	// timestamp it treats the runtime as one without events and waits for its own
	// relist. The time is taken first, so the statuses are at least that new.
	now := time.Now().UnixNano()
	resp := &runtimeapi.PodSandboxStatusResponse{Status: toSandboxStatus(sb), Timestamp: now}
	for _, c := range s.containers.inSandbox(sb.ID) {
		resp.ContainersStatuses = append(resp.ContainersStatuses, toContainerStatus(c, c.Status()))
	}
	if req.GetVerbose() {
		overhead, resources := sb.PodResources()
		info := map[string]any{
			"netNamespacePath": sb.NetNSPath,
			"runtimeHandler":   sb.RuntimeHandler,
			"config":           sb.Config,
			"image":            s.opts.PauseImage,
			"overhead":         overhead,
			"resources":        resources,
			"pid":              sb.PID,
		}
		if sb.Pauseless {
			// No pause container: its namespaces are pinned (sandbox/pauseless.go).
			delete(info, "image")
			info["pauseless"] = true
			info["ipcNamespacePath"], info["utsNamespacePath"] = sb.IPCNSPath, sb.UTSNSPath
		}
		infoJSON, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(infoJSON)}
	}
	return resp, nil
}
