package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CheckpointContainer writes a checkpoint archive of a running container at the
// request's location and leaves the container running (container/checkpoint.go).
func (s *Service) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	if err := validateCheckpointLocation(req.GetLocation()); err != nil {
		return nil, err
	}
	if req.GetTimeout() < 0 {
		return nil, invalid("timeout", "%d is negative", req.GetTimeout())
	}
	timeout := time.Duration(req.GetTimeout()) * time.Second
	if err := s.opts.Containers.Checkpoint(ctx, req.GetContainerId(), req.GetLocation(), timeout); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// validateCheckpointLocation accepts an absolute, clean path of a file (new or to be
// replaced) in an existing directory.
func validateCheckpointLocation(loc string) error {
	switch {
	case loc == "":
		return invalid("location", "is required")
	case strings.ContainsRune(loc, 0) || len(loc) > 4096:
		return invalid("location", "%s is not a path", quote(loc))
	case !filepath.IsAbs(loc):
		return invalid("location", "%s must be an absolute path", quote(loc))
	case filepath.Clean(loc) != loc:
		return invalid("location", "%s is not a clean path (no '..', '.', '//' or trailing '/')", quote(loc))
	}
	if fi, err := os.Stat(filepath.Dir(loc)); err != nil || !fi.IsDir() {
		return invalid("location", "the directory of %s does not exist", quote(loc))
	}
	if fi, err := os.Lstat(loc); err == nil && !fi.Mode().IsRegular() {
		return invalid("location", "%s exists and is not a regular file", quote(loc))
	}
	return nil
}
