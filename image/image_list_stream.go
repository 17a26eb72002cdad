package image

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageStreamChunk is how many images one StreamImages message holds.
const imageStreamChunk = 100

// StreamImages is ListImages as a stream (CRI v0.37, the kubelet's CRIListStreaming
// feature), imageStreamChunk images per message; no message for an empty list.
func (s *Service) StreamImages(req *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	resp, err := s.ListImages(stream.Context(), &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	for imgs := resp.Images; len(imgs) > 0; {
		n := min(imageStreamChunk, len(imgs))
		if err := stream.Send(&runtimeapi.StreamImagesResponse{Images: imgs[:n]}); err != nil {
			return err
		}
		imgs = imgs[n:]
	}
	return nil
}
