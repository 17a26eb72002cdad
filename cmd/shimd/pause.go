package main

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/sandbox"
	"github.com/shimd/shimd/sandbox/pause"
)

// localImage is a configured sandbox image, which must be in containerd's image store.
type localImage struct {
	client *client.Client
	ref    string
}

func (l localImage) Forget() {}

func (l localImage) Ensure(ctx context.Context, snapshotter string) (client.Image, error) {
	img, err := l.client.GetImage(ctx, l.ref)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("sandbox image %s is not in containerd's image store: %w", l.ref, errdefs.ErrNotFound)
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
// first use, so a node without registry access runs pods) or a configured one, which
// must be present in containerd's image store.
func pauseImage(cfg Config, cl *client.Client) (string, sandbox.PauseImages) {
	if cfg.Sandbox.Image == "" {
		return pause.Ref, pause.NewImporter(cl)
	}
	return cfg.Sandbox.Image, localImage{client: cl, ref: cfg.Sandbox.Image}
}
