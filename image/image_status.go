package image

import (
	"context"
	"encoding/json"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageStatus reports one image; an absent image is a nil image, not an error.
func (s *Service) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image.image", "is required")
	}
	img, err := s.Find(ctx, ref)
	if errdefs.IsNotFound(err) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ImageStatusResponse{Image: toCRI(img)}
	if req.GetVerbose() {
		info, err := json.Marshal(map[string]any{"imageSpec": img.Config, "records": img.Records, "target": img.Target})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}
