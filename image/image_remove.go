package image

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image by id, digest, unique id prefix or tag, with all its
// tags and digests, as CRI defines it (critest: "removing image by one tag should
// remove all tags"). An absent image succeeds. Content that a container still uses
// stays until that container is removed (its snapshot holds its layers).
func (s *Service) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errInvalid("image.image", "is required")
	}
	img, err := s.Find(ctx, ref)
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	toDelete := img.Records
	defer s.ImagesChanged() // seen at once by the next List
	is := s.opts.Client.ImageService()
	for i, name := range toDelete {
		var opts []images.DeleteOpt
		if i == len(toDelete)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := is.Delete(ctx, name, opts...); err != nil && !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("remove image record %s: %w", name, err)
		}
	}
	log.G(ctx).WithField("image", img.ID).WithField("records", toDelete).Info("image removed")
	return &runtimeapi.RemoveImageResponse{}, nil
}

func errInvalid(field, msg string) error {
	return fmt.Errorf("%s: %s: %w", field, msg, errdefs.ErrInvalidArgument)
}
