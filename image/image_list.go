package image

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists images, optionally only those matching the filter's reference.
func (s *Service) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		img := match(all, ref)
		all = nil
		if img != nil {
			all = append(all, img)
		}
	}
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range all {
		resp.Images = append(resp.Images, toCRI(img))
	}
	return resp, nil
}
