package image

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// streamUnpacker unpacks an image's layers straight from the registry into the
// snapshotter: each layer is read once from the network, its digest checked as it
// streams, decompressed and applied, without first being written to containerd's
// content store over gRPC and read back. Only the index, manifest and config go to
// the content store; the compressed layers are not kept (as with containerd's
// discard_unpacked_layers, and as CRI-O keeps none). A layer whose snapshot already
// exists is not downloaded at all.
//
// It is an image handler wrapper for client.Pull: it drops layer descriptors from
// the fetch, remembers the chosen manifest's layers, and unpacks them when that
// manifest's config has been fetched, inside Pull's lease and before Pull creates
// the image record, so a record never names an image that is not unpacked.
type streamUnpacker struct {
	snapshotter string
	sn          snapshots.Snapshotter
	cs          content.Store
	fetcher     func(context.Context) (remotes.Fetcher, error)
	locks       *keyedMutex
	// window is how many layers are extracted at once, each into a parentless
	// snapshot committed onto its parent after (unpack_parallel.go); 1 applies each
	// layer on its parent in turn.
	window int

	mu     sync.Mutex
	layers map[digest.Digest][]ocispec.Descriptor // by config digest
	done   bool
}

func (u *streamUnpacker) wrap(h images.Handler) images.Handler {
	return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if images.IsLayerType(desc.MediaType) {
			return nil, nil // unpacked from the stream when the config arrives
		}
		children, err := h.Handle(ctx, desc)
		if err != nil {
			return children, err
		}
		if images.IsManifestType(desc.MediaType) {
			raw, err := content.ReadBlob(ctx, u.cs, desc)
			if err != nil {
				return nil, err
			}
			var m ocispec.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
			}
			isLayer := map[digest.Digest]bool{}
			for _, l := range m.Layers {
				isLayer[l.Digest] = true
			}
			kept := children[:0:0]
			for _, c := range children {
				if !isLayer[c.Digest] || c.Digest == m.Config.Digest {
					kept = append(kept, c)
				}
			}
			u.mu.Lock()
			if u.layers == nil {
				u.layers = map[digest.Digest][]ocispec.Descriptor{}
			}
			u.layers[m.Config.Digest] = m.Layers
			u.mu.Unlock()
			return kept, nil
		}
		// The config of a manifest seen above, whatever its media type (old
		// images have application/octet-stream).
		u.mu.Lock()
		layers, ok := u.layers[desc.Digest]
		u.mu.Unlock()
		if ok {
			if err := u.unpack(ctx, desc, layers); err != nil {
				return nil, err
			}
			u.mu.Lock()
			u.done = true
			u.mu.Unlock()
		}
		return children, nil
	})
}

// unpacked tells whether a manifest's layers were unpacked by this pull.
func (u *streamUnpacker) unpacked() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.done
}

func (u *streamUnpacker) unpack(ctx context.Context, config ocispec.Descriptor, layers []ocispec.Descriptor) error {
	start := time.Now()
	raw, err := content.ReadBlob(ctx, u.cs, config)
	if err != nil {
		return err
	}
	var img ocispec.Image
	if err := json.Unmarshal(raw, &img); err != nil {
		return fmt.Errorf("image config %s: %w", config.Digest, err)
	}
	diffIDs := img.RootFS.DiffIDs
	if len(diffIDs) != len(layers) {
		return fmt.Errorf("image config %s has %d diff ids for %d layers: %w", config.Digest, len(diffIDs), len(layers), errdefs.ErrInvalidArgument)
	}
	chain := identity.ChainIDs(append([]digest.Digest(nil), diffIDs...))

	// Layers are applied in order, each on its parent; the downloads of the next
	// ones run ahead into memory while one is applied. Where the snapshotter can
	// rebase (u.window above 1), the next ones are extracted as well, each into a
	// snapshot of its own, and committed in order (unpack_parallel.go). A pull
	// claims a chain id (a layer on its parents) before it downloads it; a chain
	// another pull has claimed is waited for, not downloaded twice.
	ctx, cancel := context.WithCancel(ctx)
	p := &chainPull{u: u, layers: layers, diffIDs: diffIDs, chain: chain,
		pipes: make([]*chunkPipe, len(layers)), exts: make([]*extraction, len(layers)), claims: make([]func(), len(layers))}
	defer func() {
		cancel()
		p.release(ctx)
	}()
	ahead := prefetchLayers
	if u.window > 1 {
		ahead = u.window - 1
	}
	fetched := 0
	for i := range layers {
		for j := i; j <= i+ahead; j++ {
			if err := p.prefetch(ctx, j); err != nil {
				return err
			}
		}
		got, err := p.apply(ctx, i)
		if err != nil {
			return err
		}
		if got {
			fetched++
		}
	}
	// The config holds the unpacked chain against garbage collection, as
	// containerd's own unpacker labels it.
	if len(chain) > 0 {
		key := "containerd.io/gc.ref.snapshot." + u.snapshotter
		info := content.Info{Digest: config.Digest, Labels: map[string]string{key: chain[len(chain)-1].String()}}
		if _, err := u.cs.Update(ctx, info, "labels."+key); err != nil {
			return fmt.Errorf("label config %s: %w", config.Digest, err)
		}
	}
	log.G(ctx).WithField("layers", len(layers)).WithField("fetched", fetched).WithField("at_once", u.window).
		WithField("duration", time.Since(start).String()).Debug("image unpacked")
	return nil
}

// chainPull is one unpack's walk up an image's chain of layers: what it downloads,
// extracts and has claimed, by layer index.
type chainPull struct {
	u       *streamUnpacker
	layers  []ocispec.Descriptor
	diffIDs []digest.Digest
	chain   []digest.Digest
	fetcher remotes.Fetcher // made on the first download
	pipes   []*chunkPipe    // each downloaded layer's chunks
	exts    []*extraction   // each layer extracted ahead (u.window above 1)
	claims  []func()        // unlock of each claimed chain id
}

// key is the claim of layer j's chain id.
func (p *chainPull) key(j int) string { return p.u.snapshotter + "/" + p.chain[j].String() }

// exists tells whether layer j's chain is unpacked.
func (p *chainPull) exists(ctx context.Context, j int) bool {
	_, err := p.u.sn.Stat(ctx, p.chain[j].String())
	return err == nil
}

// ref is layer j of the chain.
func (p *chainPull) ref(j int) layerRef {
	r := layerRef{desc: p.layers[j], diffID: p.diffIDs[j], chainID: p.chain[j].String()}
	if j > 0 {
		r.parent = p.chain[j-1].String()
	}
	return r
}

// begin downloads layer j, whose chain this pull has claimed and seen missing, and
// extracts it where layers are extracted ahead.
func (p *chainPull) begin(ctx context.Context, j int) error {
	if p.fetcher == nil {
		f, err := p.u.fetcher(ctx)
		if err != nil {
			return err
		}
		p.fetcher = f
	}
	p.pipes[j] = newChunkPipe(prefetchChunks)
	go download(ctx, p.fetcher, p.layers[j], p.pipes[j])
	if p.u.window > 1 {
		p.exts[j] = p.u.extract(ctx, p.ref(j), p.pipes[j])
	}
	return nil
}

// prefetch begins layer j if no other pull has claimed it and it is not unpacked.
func (p *chainPull) prefetch(ctx context.Context, j int) error {
	if j >= len(p.layers) || p.claims[j] != nil {
		return nil
	}
	unlock, ok := p.u.locks.tryLock(p.key(j))
	if !ok {
		return nil
	}
	if p.exists(ctx, j) {
		unlock()
		return nil
	}
	p.claims[j] = unlock
	return p.begin(ctx, j)
}

// apply makes layer i's chain, unless it is there: fetched tells that this pull
// downloaded it. A chain another pull has claimed is waited for, then looked at
// again (that pull may have failed).
func (p *chainPull) apply(ctx context.Context, i int) (fetched bool, err error) {
	if p.claims[i] == nil {
		p.claims[i] = p.u.locks.lock(p.key(i))
		if !p.exists(ctx, i) {
			if err := p.begin(ctx, i); err != nil {
				return false, err
			}
		}
	}
	if p.pipes[i] != nil {
		if p.exts[i] != nil {
			err = p.u.commit(ctx, p.exts[i], p.ref(i))
		} else {
			err = p.u.layer(ctx, p.ref(i), p.pipes[i])
		}
		p.pipes[i].CloseRead()
		if err != nil {
			return false, fmt.Errorf("layer %d (%s): %w", i, p.layers[i].Digest, err)
		}
		fetched = true
	}
	p.claims[i]()
	p.claims[i] = nil
	return fetched, nil
}

// release ends what the walk left when it stopped: downloads, extractions not
// committed, claims. ctx is the walk's, cancelled.
func (p *chainPull) release(ctx context.Context) {
	for i := range p.layers {
		if p.pipes[i] != nil {
			p.pipes[i].CloseRead()
		}
		if p.exts[i] != nil {
			p.u.abort(ctx, p.exts[i])
		}
		if p.claims[i] != nil {
			p.claims[i]()
		}
	}
}

// layerRef is one layer of an image's chain.
type layerRef struct {
	desc    ocispec.Descriptor
	diffID  digest.Digest
	chainID string // the layer on the ones below it
	parent  string // the chain below it; "" for the image's first layer
}

// layer makes the snapshot l.chainID from one layer, read from p, on its parent. The
// caller holds the claim on the chain and has seen that it does not exist.
func (u *streamUnpacker) layer(ctx context.Context, l layerRef, p *chunkPipe) error {
	opts := layerOpts(l)
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, uniquePart(), l.chainID)
	mounts, err := u.sn.Prepare(ctx, key, l.parent, opts...)
	if err != nil {
		return fmt.Errorf("prepare snapshot: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			if err := u.sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
				logRemoveFailed(ctx, key, err)
			}
		}
	}()
	got, err := applyStream(p, func(r io.Reader) error { return apply(ctx, mounts, r) })
	if err != nil {
		return err
	}
	committed, err = u.commitLayer(ctx, l, key, got, opts)
	return err
}

// commitLayer commits the extraction snapshot key as l's chain if got, its diff id,
// is the config's. committed is false where another process made the chain
// meanwhile: the caller removes key.
func (u *streamUnpacker) commitLayer(ctx context.Context, l layerRef, key string, got digest.Digest, opts []snapshots.Opt) (committed bool, err error) {
	if got != l.diffID {
		return false, fmt.Errorf("uncompressed digest %s, the config says %s: %w", got, l.diffID, errdefs.ErrFailedPrecondition)
	}
	if err := u.sn.Commit(ctx, l.chainID, key, opts...); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("commit snapshot: %w", err)
	}
	return true, nil
}

// layerOpts are the options of l's snapshot, at Prepare and Commit.
func layerOpts(l layerRef) []snapshots.Opt {
	labels := snapshots.FilterInheritedLabels(l.desc.Annotations)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[snapshots.LabelSnapshotRef] = l.chainID
	labels[snapshots.LabelSnapshotDiffID] = l.diffID.String()
	return []snapshots.Opt{snapshots.WithLabels(labels)}
}

func uniquePart() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d-%s", time.Now().Nanosecond(), base64.RawURLEncoding.EncodeToString(b[:]))
}
