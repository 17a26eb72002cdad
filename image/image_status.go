package image

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/image-spec/identity"
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
	// Layers are kept only unpacked, per snapshotter: an image not unpacked for the
	// runtime handler's snapshotter is absent for it, so the kubelet pulls it again
	// for that handler.
	if ok, err := s.unpackedFor(ctx, img, s.snapshotter(req.GetImage().GetRuntimeHandler())); err != nil {
		return nil, err
	} else if !ok {
		return &runtimeapi.ImageStatusResponse{}, nil
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

// unpackedFor tells whether img's layers are unpacked in snapshotter. A chain found
// is remembered for a while (listCache.unpacked): asking the snapshotter is a call
// to containerd, slow while it is busy starting pods, and concurrent callers share
// one such call.
func (s *Service) unpackedFor(ctx context.Context, img *Image, snapshotter string) (bool, error) {
	diffIDs := img.Config.RootFS.DiffIDs
	if len(diffIDs) == 0 {
		return true, nil
	}
	key := img.ID + " " + snapshotter
	known, fresh := s.list.knownUnpacked(key)
	if fresh {
		return true, nil
	}
	gen := s.list.generation()
	chain := identity.ChainID(diffIDs).String()
	statKey := snapshotter + " " + chain + " " + strconv.FormatUint(gen, 10)
	stat := s.list.unpackedLookup(key, gen, func(ctx context.Context) error {
		_, err := s.opts.Client.SnapshotService(snapshotter).Stat(ctx, chain)
		return err
	})
	if known {
		// Found unpacked since the records last changed, longer ago than the TTL:
		// still the answer (a chain goes only with its last record, a change the
		// events tell of). It is asked again in the background, for a snapshot
		// removed behind the records: a CreateContainer meanwhile fails as it would
		// within the TTL, and the next ImageStatus after the lookup answers absent,
		// so the kubelet pulls again.
		startShared(ctx, &s.stats, statKey, stat)
		return true, nil
	}
	if _, err := shared(ctx, &s.stats, statKey, stat); err == nil {
		return true, nil
	} else if !errdefs.IsNotFound(err) {
		return false, err
	}
	// Not unpacked there; an image whose layers are stored (an imported one, such
	// as the built-in pause image) is unpacked on use.
	cs := s.opts.Client.ContentStore()
	m, err := images.Manifest(ctx, cs, img.Target, s.platform)
	if err != nil {
		return false, nil
	}
	for _, l := range m.Layers {
		if _, err := cs.Info(ctx, l.Digest); err != nil {
			return false, nil
		}
	}
	return true, nil
}
