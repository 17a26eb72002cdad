package pause

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/image"
)

// Labels on the manifest blob that tell containerd's garbage collector the
// manifest holds its config and layer (it cannot parse blobs itself).
const (
	gcRefConfig = "containerd.io/gc.ref.content.config"
	gcRefLayer0 = "containerd.io/gc.ref.content.l.0"
)

// Ensure makes the built-in pause image present in containerd, in the
// namespace carried by ctx, and unpacked for snapshotter ("" for the
// default), and returns it. It is idempotent and cheap when the image is
// already there: one image lookup, two blob reads and a snapshot stat.
// Otherwise it writes the blobs (under a lease, with GC labels), creates or
// repoints the image record Ref, labelled PinnedLabel, and unpacks it.
//
// It uses only the images, content, leases, snapshots and diff services, so
// it works against containerd 1.6 as well as 2.x. Ensure does not cache;
// Importer does.
func Ensure(ctx context.Context, c *client.Client, snapshotter string) (client.Image, error) {
	want := Build()
	img, ok, err := check(ctx, c, snapshotter, want)
	if err != nil {
		return nil, fmt.Errorf("check built-in pause image %s: %w", Ref, err)
	}
	if ok {
		return img, nil
	}
	img, err = importImage(ctx, c, snapshotter, want)
	if err != nil {
		return nil, fmt.Errorf("import built-in pause image %s: %w", Ref, err)
	}
	return img, nil
}

// check reports whether the image record Ref points at want's manifest, is
// pinned, and is unpacked for snapshotter.
func check(ctx context.Context, c *client.Client, snapshotter string, want Image) (client.Image, bool, error) {
	rec, err := c.ImageService().Get(ctx, Ref)
	if errdefs.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if rec.Target.Digest != want.Manifest.Desc.Digest || rec.Labels[PinnedLabel] != PinnedValue {
		return nil, false, nil
	}
	img := client.NewImage(c, rec)
	unpacked, err := img.IsUnpacked(ctx, snapshotter)
	if errdefs.IsNotFound(err) { // a blob is missing: import again
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return img, unpacked, nil
}

// importImage writes want into the content store, points the image record
// Ref at it and unpacks it. Every step is idempotent.
func importImage(ctx context.Context, c *client.Client, snapshotter string, want Image) (client.Image, error) {
	// The lease holds the blobs and snapshots until the image record and the
	// unpack's snapshot label on the config take over.
	ctx, done, err := image.WithLease(ctx, c, "pause-import")
	if err != nil {
		return nil, fmt.Errorf("create lease: %w", err)
	}
	defer done(context.WithoutCancel(ctx)) //nolint:errcheck // the lease expires anyway

	cs := c.ContentStore()
	for _, b := range []Blob{want.Layer, want.Config} {
		if err := writeBlob(ctx, cs, b); err != nil {
			return nil, err
		}
	}
	gc := map[string]string{
		gcRefConfig: want.Config.Desc.Digest.String(),
		gcRefLayer0: want.Layer.Desc.Digest.String(),
	}
	if err := writeBlob(ctx, cs, want.Manifest, content.WithLabels(gc)); err != nil {
		return nil, err
	}
	// WriteBlob sets no labels on a blob that already exists: set them anyway.
	info := content.Info{Digest: want.Manifest.Desc.Digest, Labels: gc}
	if _, err := cs.Update(ctx, info, "labels."+gcRefConfig, "labels."+gcRefLayer0); err != nil {
		return nil, fmt.Errorf("label manifest %s: %w", info.Digest, err)
	}

	rec, err := putRecord(ctx, c.ImageService(), images.Image{
		Name:   Ref,
		Target: want.Manifest.Desc,
		Labels: map[string]string{PinnedLabel: PinnedValue},
	})
	if err != nil {
		return nil, err
	}
	img := client.NewImage(c, rec)
	if err := img.Unpack(ctx, snapshotter); err != nil {
		return nil, fmt.Errorf("unpack for snapshotter %q: %w", snapshotter, err)
	}
	return img, nil
}

func writeBlob(ctx context.Context, cs content.Store, b Blob, opts ...content.Opt) error {
	ref := "shimd-pause-" + b.Desc.Digest.Encoded()
	if err := content.WriteBlob(ctx, cs, ref, bytes.NewReader(b.Data), b.Desc, opts...); err != nil {
		return fmt.Errorf("write blob %s (%s): %w", b.Desc.Digest, b.Desc.MediaType, err)
	}
	return nil
}

// putRecord creates the image record, or repoints an existing one (an older
// pause build, or one that lost its label) without touching other labels.
func putRecord(ctx context.Context, is images.Store, rec images.Image) (images.Image, error) {
	created, err := is.Create(ctx, rec)
	if err == nil {
		return created, nil
	}
	if !errdefs.IsAlreadyExists(err) {
		return images.Image{}, fmt.Errorf("create image record: %w", err)
	}
	updated, err := is.Update(ctx, rec, "target", "labels."+PinnedLabel)
	if err != nil {
		return images.Image{}, fmt.Errorf("update image record: %w", err)
	}
	return updated, nil
}

// Importer is Ensure with memory: once the image is ensured for a
// namespace and snapshotter, later calls return it without asking
// containerd, which keeps it off the RunPodSandbox hot path. Concurrent first
// calls wait for one import instead of racing.
//
// The cache can go stale if someone removes the image behind shimd's back.
// A caller whose use of the returned image fails (say, creating the pause
// container's snapshot returns NotFound) calls Forget and Ensure again.
type Importer struct {
	client *client.Client

	// Lock order: slot before mu. slot (capacity 1) is held across the
	// containerd calls of one import, and waited for with the caller's ctx;
	// mu only guards ensured and is never held across a containerd call.
	slot    chan struct{}
	mu      sync.Mutex
	ensured map[cacheKey]images.Image
}

// cacheKey says where the image was ensured. An empty namespace is the
// client's default; an empty snapshotter is containerd's default.
type cacheKey struct{ namespace, snapshotter string }

// NewImporter returns an Importer for the built-in image on c.
func NewImporter(c *client.Client) *Importer {
	return &Importer{
		client:  c,
		slot:    make(chan struct{}, 1),
		ensured: make(map[cacheKey]images.Image),
	}
}

// Ensure returns the built-in pause image, unpacked for snapshotter ("" for
// containerd's default), importing it into the namespace of ctx on first use
// (see the package-level Ensure). Its signature is sandbox.PauseImageFunc.
func (i *Importer) Ensure(ctx context.Context, snapshotter string) (client.Image, error) {
	ns, _ := namespaces.Namespace(ctx)
	key := cacheKey{ns, snapshotter}
	if img, ok := i.cached(key); ok {
		return img, nil
	}
	select {
	case i.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait to import built-in pause image %s: %w", Ref, ctx.Err())
	}
	defer func() { <-i.slot }()
	if img, ok := i.cached(key); ok { // another caller finished while we waited
		return img, nil
	}
	img, err := Ensure(ctx, i.client, snapshotter)
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.ensured[key] = img.Metadata()
	i.mu.Unlock()
	return img, nil
}

// Forget drops everything the Importer remembers, so the next Ensure asks
// containerd again (and re-imports if needed).
func (i *Importer) Forget() {
	i.mu.Lock()
	clear(i.ensured)
	i.mu.Unlock()
}

func (i *Importer) cached(key cacheKey) (client.Image, bool) {
	i.mu.Lock()
	rec, ok := i.ensured[key]
	i.mu.Unlock()
	if !ok {
		return nil, false
	}
	return client.NewImage(i.client, rec), true
}
