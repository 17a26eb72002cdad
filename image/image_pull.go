package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls an image and unpacks it for the runtime handler's snapshotter.
// Concurrent pulls of one reference (with the same credentials) share one download.
// The download is detached from the caller: a caller whose deadline passes gets
// DeadlineExceeded while the pull goes on for the next caller; a pull that receives
// nothing for NoProgressTimeout is cancelled.
func (s *Service) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref, err := ParseRef(req.GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, err := s.pullShared(ctx, ref, s.snapshotter(req.GetImage().GetRuntimeHandler()), req.GetAuth())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}

// Pull pulls ref, unpacked for snapshotter, and returns the image id. The sandbox path
// uses it for a configured pause image that is not present.
func (s *Service) Pull(ctx context.Context, ref, snapshotter string) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	return s.pullShared(ctx, r, snapshotter, nil)
}

func (s *Service) pullShared(ctx context.Context, ref Ref, snap string, auth *runtimeapi.AuthConfig) (string, error) {
	key := ref.Name + "|" + snap + "|" + authKey(auth)
	ch := s.pulls.DoChan(key, func() (any, error) {
		return s.pull(context.WithoutCancel(ctx), ref, snap, auth)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return "", res.Err
		}
		return res.Val.(string), nil
	case <-ctx.Done():
		return "", fmt.Errorf("pull %s: %w", ref.Name, ctx.Err())
	}
}

func (s *Service) pull(ctx context.Context, ref Ref, snapshotter string, auth *runtimeapi.AuthConfig) (id string, err error) {
	start := time.Now()
	// Seen at once by the next List (the kubelet asks for the image's status next),
	// whatever the outcome: a failed pull may have written records too.
	defer s.ImagesChanged()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &progress{}
	p.mark()
	if obs := s.opts.PullObserver; obs != nil {
		defer func() { obs(PullStats{Bytes: p.bytes.Load(), Duration: time.Since(start), Err: err}) }()
	}
	stalled := errors.New("stalled")
	go func() { // watchdog; ends with the pull
		tick := time.NewTicker(min(s.opts.NoProgressTimeout/10, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if p.idle() > s.opts.NoProgressTimeout {
					cancel(stalled)
					return
				}
			}
		}
	}()

	ctx, done, err := WithLease(ctx, s.opts.Client, "pull")
	if err != nil {
		return "", fmt.Errorf("lease: %w", err)
	}
	defer done(context.WithoutCancel(ctx)) //nolint:errcheck // recovery deletes it otherwise
	resolver := s.resolver(ctx, ref, auth, p)
	u := &streamUnpacker{
		snapshotter: snapshotter,
		sn:          s.opts.Client.SnapshotService(snapshotter),
		cs:          s.opts.Client.ContentStore(),
		fetcher:     func(ctx context.Context) (remotes.Fetcher, error) { return resolver.Fetcher(ctx, ref.Name) },
		locks:       &s.layerLocks,
		window:      s.unpackWindow(ctx, snapshotter),
	}
	wrap := u.wrap
	if v := s.opts.Verifier; v != nil {
		wrap = func(h images.Handler) images.Handler { return verifyFirst(v, ref.Name, u.wrap(h)) }
	}
	img, err := s.opts.Client.Pull(ctx, ref.Name,
		client.WithResolver(resolver),
		client.WithImageHandlerWrapper(wrap),
		client.WithPlatformMatcher(s.platform),
		client.WithMaxConcurrentDownloads(8),
	)
	if err == nil && !u.unpacked() {
		err = fmt.Errorf("%w: %w", errNoManifest, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		if errors.Is(context.Cause(ctx), stalled) {
			return "", fmt.Errorf("pull %s: no progress for %s: %w", ref.Name, s.opts.NoProgressTimeout, errdefs.ErrUnavailable)
		}
		return "", classifyPullError(ref, err)
	}
	// A digest record beside the tag, as the kubelet looks images up by either.
	if ref.Digest == "" {
		rec := images.Image{Name: ref.Repo + "@" + img.Target().Digest.String(), Target: img.Target(), Labels: img.Labels()}
		if _, err := s.opts.Client.ImageService().Create(ctx, rec); err != nil && !errdefs.IsAlreadyExists(err) {
			return "", fmt.Errorf("record digest of %s: %w", ref.Name, err)
		} else if errdefs.IsAlreadyExists(err) {
			if _, err := s.opts.Client.ImageService().Update(ctx, rec, "target"); err != nil {
				return "", fmt.Errorf("record digest of %s: %w", ref.Name, err)
			}
		}
	}
	m, err := s.metaFor(ctx, img.Metadata())
	if err != nil {
		return "", err
	}
	log.G(ctx).WithField("image", ref.Name).WithField("id", m.ID).WithField("duration", time.Since(start).String()).Info("image pulled")
	return m.ID.String(), nil
}

// authKey distinguishes pulls by credentials, without keeping them in the key.
func authKey(a *runtimeapi.AuthConfig) string {
	if a == nil {
		return ""
	}
	b, _ := proto.Marshal(a)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
