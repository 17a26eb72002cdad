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
	if err := s.opts.Containers.Checkpoints().Checkpoint(ctx, req.GetContainerId(), req.GetLocation(), timeout); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// validateCheckpointLocation accepts an absolute, clean path of a new file in an
// existing directory.
func validateCheckpointLocation(loc string) error {
	if err := validateAbsPath("location", loc); err != nil {
		return err
	}
	if fi, err := os.Stat(filepath.Dir(loc)); err != nil || !fi.IsDir() {
		return invalid("location", "the directory of %s does not exist", quote(loc))
	}
	if _, err := os.Lstat(loc); err == nil {
		// Never overwrite: shimd runs as root, and a path given by mistake could
		// name any file of the node.
		return invalid("location", "%s exists: remove it first, or give a new path", quote(loc))
	}
	return nil
}

// validateAbsPath accepts an absolute, clean path.
func validateAbsPath(field, p string) error {
	switch {
	case p == "":
		return invalid(field, "is required")
	case strings.ContainsRune(p, 0) || len(p) > 4096:
		return invalid(field, "%s is not a path", quote(p))
	case !filepath.IsAbs(p):
		return invalid(field, "%s must be an absolute path", quote(p))
	case filepath.Clean(p) != p:
		return invalid(field, "%s is not a clean path (no '..', '.', '//' or trailing '/')", quote(p))
	}
	return nil
}
