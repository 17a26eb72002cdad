package main

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/sandbox"
	"github.com/shimd/shimd/sandbox/pause"
)

// localImage is a configured sandbox image, pulled when it is not present.
type localImage struct {
	client *client.Client
	images *image.Service
	ref    string
}

func (l localImage) Forget() {}

func (l localImage) Ensure(ctx context.Context, snapshotter string) (client.Image, error) {
	img, err := l.client.GetImage(ctx, l.ref)
	if errdefs.IsNotFound(err) {
		if _, err := l.images.Pull(ctx, l.ref, snapshotter); err != nil {
			return nil, fmt.Errorf("pull sandbox image: %w", err)
		}
		img, err = l.client.GetImage(ctx, l.ref)
	}
	if err != nil {
		return nil, err
	}
	if ok, err := img.IsUnpacked(ctx, snapshotter); err != nil || !ok {
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, fmt.Errorf("unpack sandbox image %s: %w", l.ref, err)
		}
	}
	return img, nil
}

// pauseImage chooses the sandbox image: the built-in one (imported into containerd on
// first use, so a node without registry access runs pods) or a configured one, pulled
// through the image service when absent.
func pauseImage(cfg Config, cl *client.Client, images *image.Service) (string, sandbox.PauseImages) {
	if cfg.Sandbox.Image == "" {
		return pause.Ref, pause.NewImporter(cl)
	}
	ref := cfg.Sandbox.Image
	if r, err := image.ParseRef(ref); err == nil {
		ref = r.Name
	}
	return ref, localImage{client: cl, images: images, ref: ref}
}
