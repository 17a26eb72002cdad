package image

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/imageverifier"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image verifiers judge a pull before anything of the image is fetched, as
// containerd's transfer service does for the pulls of its CRI plugin. They see the
// descriptor the reference resolved to (the manifest or index), so the image they
// allowed is the one pulled, whatever the tag points at meanwhile. shimd runs
// containerd's own verifier (pkg/imageverifier/bindir, set up in cmd/shimd): each
// executable of a directory, in name order, gets -name, -digest and
// -stdin-media-type and the descriptor as JSON on stdin; exit 0 allows, any other
// refuses with its stdout as the reason. A verifier that gives no judgement (it cannot
// start, or runs past its timeout) blocks the pull too.

// verifyFirst wraps a pull's handler so that v judges the first descriptor it is
// handed, the root (images.Dispatch starts from the resolved descriptor and hands
// out its children only after it), before h fetches it. A refusal ends the pull
// there; the descriptors after an allowed root pass straight to h.
func verifyFirst(v imageverifier.ImageVerifier, name string, h images.Handler) images.Handler {
	var once sync.Once
	var verdict error
	return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		once.Do(func() { verdict = judge(ctx, v, name, desc) })
		if verdict != nil {
			return nil, verdict
		}
		return h.Handle(ctx, desc)
	})
}

// judge asks v about image name at desc: PermissionDenied when a verifier refuses
// it, FailedPrecondition when they give no judgement.
func judge(ctx context.Context, v imageverifier.ImageVerifier, name string, desc ocispec.Descriptor) error {
	j, err := v.VerifyImage(ctx, name, desc)
	if err != nil {
		return fmt.Errorf("the image verifiers gave no judgement on %s@%s, so it is not pulled: %v: %w", name, desc.Digest, err, errdefs.ErrFailedPrecondition)
	}
	if !j.OK {
		return fmt.Errorf("the image verifiers refused %s@%s: %s: %w", name, desc.Digest, j.Reason, errdefs.ErrPermissionDenied)
	}
	log.G(ctx).WithField("image", name).WithField("digest", desc.Digest.String()).WithField("verifiers", j.Reason).Debug("image verifiers allowed the pull")
	return nil
}
