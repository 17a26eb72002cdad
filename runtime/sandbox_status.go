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
	sb, err := s.opts.Sandboxes.Pod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{}
	if s.opts.EventedPLEGStatus {
		// Evented PLEG: the time the statuses were read, and the pod's containers
		// with it. The clock is read first, so a container event that happens while
		// the statuses are gathered carries a later time and wins in the kubelet's
		// cache. Off by default: a kubelet v1.37 that gets a timestamp takes
		// its container statuses from here and leaves its list of the current
		// sandbox's containers empty, so it never sees an init container finish and
		// starts it again and again (kubernetes#133371). With timestamp 0 it asks
		// ContainerStatus for each container and fills that list.
		resp.Timestamp = time.Now().UnixNano()
		resp.ContainersStatuses = s.opts.Containers.StatusesOf(sb.ID)
	}
	resp.Status = sb.CRIStatus()
	if req.GetVerbose() {
		info := map[string]any{
			"netNamespacePath": sb.NetNSPath,
			"runtimeHandler":   sb.RuntimeHandler,
			"config":           sb.Config,
			"image":            s.opts.PauseImage,
			"overhead":         sb.Overhead,
			"resources":        sb.Resources,
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
