package runtime

import (
	"context"
	"encoding/json"

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
	resp := &runtimeapi.PodSandboxStatusResponse{Status: toSandboxStatus(sb)}
	if req.GetVerbose() {
		overhead, resources := sb.PodResources()
		info, err := json.Marshal(map[string]any{
			"netNamespacePath": sb.NetNSPath,
			"runtimeHandler":   sb.RuntimeHandler,
			"config":           sb.Config,
			"image":            s.opts.PauseImage,
			"overhead":         overhead,
			"resources":        resources,
		})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}
