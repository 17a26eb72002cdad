package image

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
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
	// ones run ahead into memory while one is applied. A pull claims a chain id (a
	// layer on its parents) before it downloads it; a chain another pull has
	// claimed is waited for, not downloaded twice.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fetcher remotes.Fetcher
	pipes := make([]*chunkPipe, len(layers))
	claims := make([]func(), len(layers)) // unlock of each claimed chain id
	defer func() {
		for i := range layers {
			if pipes[i] != nil {
				pipes[i].CloseRead()
			}
			if claims[i] != nil {
				claims[i]()
			}
		}
	}()
	key := func(j int) string { return u.snapshotter + "/" + chain[j].String() }
	exists := func(j int) bool {
		_, err := u.sn.Stat(ctx, chain[j].String())
		return err == nil
	}
	getFetcher := func() error {
		if fetcher != nil {
			return nil
		}
		f, err := u.fetcher(ctx)
		fetcher = f
		return err
	}
	// prefetch starts downloading layer j if no other pull has claimed it and it is
	// not unpacked.
	prefetch := func(j int) error {
		if j >= len(layers) || claims[j] != nil {
			return nil
		}
		unlock, ok := u.locks.tryLock(key(j))
		if !ok {
			return nil
		}
		if exists(j) {
			unlock()
			return nil
		}
		if err := getFetcher(); err != nil {
			unlock()
			return err
		}
		claims[j] = unlock
		pipes[j] = newChunkPipe(prefetchChunks)
		go download(ctx, fetcher, layers[j], pipes[j])
		return nil
	}
	fetched := 0
	for i, l := range layers {
		for j := i; j <= i+prefetchLayers; j++ {
			if err := prefetch(j); err != nil {
				return err
			}
		}
		if claims[i] == nil {
			// Another pull has it, or it is unpacked: wait for that pull, then
			// look again (it may have failed).
			claims[i] = u.locks.lock(key(i))
			if !exists(i) {
				if err := getFetcher(); err != nil {
					return err
				}
				pipes[i] = newChunkPipe(prefetchChunks)
				go download(ctx, fetcher, layers[i], pipes[i])
			}
		}
		if pipes[i] != nil {
			parent := ""
			if i > 0 {
				parent = chain[i-1].String()
			}
			err := u.layer(ctx, l, diffIDs[i], chain[i].String(), parent, pipes[i])
			pipes[i].CloseRead()
			if err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
			}
			fetched++
		}
		claims[i]()
		claims[i] = nil
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
	log.G(ctx).WithField("layers", len(layers)).WithField("fetched", fetched).
		WithField("duration", time.Since(start).String()).Debug("image unpacked")
	return nil
}

// layer makes the snapshot chainID from one layer, read from p. The caller holds
// the claim on chainID and has seen that it does not exist.
func (u *streamUnpacker) layer(ctx context.Context, desc ocispec.Descriptor, diffID digest.Digest, chainID, parent string, p *chunkPipe) error {
	labels := snapshots.FilterInheritedLabels(desc.Annotations)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[snapshots.LabelSnapshotRef] = chainID
	labels[snapshots.LabelSnapshotDiffID] = diffID.String()
	opts := []snapshots.Opt{snapshots.WithLabels(labels)}
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, uniquePart(), chainID)
	mounts, err := u.sn.Prepare(ctx, key, parent, opts...)
	if err != nil {
		return fmt.Errorf("prepare snapshot: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			if err := u.sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
				log.G(ctx).WithError(err).WithField("key", key).Warn("remove extraction snapshot")
			}
		}
	}()
	got, err := applyStream(ctx, mounts, p)
	if err != nil {
		return err
	}
	if got != diffID {
		return fmt.Errorf("uncompressed digest %s, the config says %s: %w", got, diffID, errdefs.ErrFailedPrecondition)
	}
	if err := u.sn.Commit(ctx, chainID, key, opts...); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil // made meanwhile by another process; ours is removed
		}
		return fmt.Errorf("commit snapshot: %w", err)
	}
	committed = true
	return nil
}

// download fetches a layer blob, checks its size and digest, decompresses it and
// writes the tar stream into p, recording its digest (the diff id) in p. It runs on
// its own goroutine, so that reading, checking and decompressing use one core while
// applyStream writes files on another. A blob that is not what the manifest names
// fails as such, even where it breaks decompression first.
func download(ctx context.Context, fetcher remotes.Fetcher, desc ocispec.Descriptor, p *chunkPipe) {
	rc, err := fetcher.Fetch(ctx, desc)
	if err != nil {
		p.CloseWithError(fmt.Errorf("fetch: %w", err))
		return
	}
	defer rc.Close()
	v := newVerifying(rc, desc)
	verified := func(err error) error {
		if _, verr := io.Copy(io.Discard, v); verr != nil {
			return verr
		}
		return err
	}
	ds, err := compression.DecompressStream(v)
	if err != nil {
		p.CloseWithError(verified(fmt.Errorf("decompress: %w", err)))
		return
	}
	defer ds.Close()
	diff := digest.Canonical.Digester()
	if _, err := p.ReadFrom(io.TeeReader(ds, diff.Hash())); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			p.CloseWithError(err) // the reader gave up
			return
		}
		p.CloseWithError(verified(fmt.Errorf("decompress: %w", err)))
		return
	}
	// Whatever follows the compressed stream still counts toward the blob's digest.
	if err := verified(nil); err != nil {
		p.CloseWithError(err)
		return
	}
	p.diffID = diff.Digest()
	p.CloseWithError(nil)
}

// applyStream applies the tar stream download writes into p to mounts, and returns
// its diff id once download has checked the blob. Until the caller commits the
// snapshot, a bad blob leaves nothing behind.
func applyStream(ctx context.Context, mounts []mount.Mount, p *chunkPipe) (digest.Digest, error) {
	if err := apply(ctx, mounts, p); err != nil {
		// A failed download shows here too: apply read its error.
		return "", fmt.Errorf("apply: %w", err)
	}
	// The tar reader stops at the end-of-archive marker: read the rest, so that
	// download's checks (and errors) come in.
	if _, err := io.Copy(io.Discard, p); err != nil {
		return "", err
	}
	return p.diffID, nil
}

// verifying reads a blob, failing at its end (instead of io.EOF) unless it had
// exactly the descriptor's size and digest.
type verifying struct {
	r        io.Reader
	desc     ocispec.Descriptor
	verifier digest.Verifier
	n        int64
}

func newVerifying(r io.Reader, desc ocispec.Descriptor) *verifying {
	return &verifying{r: io.LimitReader(r, desc.Size+1), desc: desc, verifier: desc.Digest.Verifier()}
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	_, _ = v.verifier.Write(p[:n])
	if v.n > v.desc.Size {
		return n, fmt.Errorf("more than the %d bytes the manifest says: %w", v.desc.Size, errdefs.ErrFailedPrecondition)
	}
	if err == io.EOF {
		if v.n != v.desc.Size {
			return n, fmt.Errorf("got %d bytes, the manifest says %d: %w", v.n, v.desc.Size, errdefs.ErrFailedPrecondition)
		}
		if !v.verifier.Verified() {
			return n, fmt.Errorf("content does not match digest %s: %w", v.desc.Digest, errdefs.ErrFailedPrecondition)
		}
	}
	return n, err
}

// apply writes a tar stream into a prepared snapshot. Overlay and a plain bind of a
// directory are written in place, as containerd's own applier does; anything else is
// mounted on a temporary directory first.
func apply(ctx context.Context, mounts []mount.Mount, r io.Reader) error {
	if len(mounts) == 1 {
		m := mounts[0]
		switch m.Type {
		case "overlay":
			if upper, lower, ok := overlayDirs(m.Options); ok {
				opts := []archive.ApplyOpt{archive.WithConvertWhiteout(archive.OverlayConvertWhiteout)}
				if len(lower) > 0 {
					opts = append(opts, archive.WithParents(lower))
				}
				_, err := archive.Apply(ctx, upper, r, opts...)
				return err
			}
		case "bind":
			if !readOnly(m.Options) {
				_, err := archive.Apply(ctx, m.Source, r)
				return err
			}
		}
	}
	return mount.WithTempMount(ctx, mounts, func(root string) error {
		_, err := archive.Apply(ctx, root, r)
		return err
	})
}

func overlayDirs(options []string) (upper string, lower []string, ok bool) {
	for _, o := range options {
		if v, found := strings.CutPrefix(o, "upperdir="); found {
			upper = v
		} else if v, found := strings.CutPrefix(o, "lowerdir="); found {
			lower = strings.Split(v, ":")
		}
	}
	return upper, lower, upper != ""
}

func readOnly(options []string) bool {
	for _, o := range options {
		if o == "ro" {
			return true
		}
	}
	return false
}

func uniquePart() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d-%s", time.Now().Nanosecond(), base64.RawURLEncoding.EncodeToString(b[:]))
}

// keyedMutex serialises work on one key (a snapshot chain id), so that concurrent
// pulls of images sharing a layer download it once.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// tryLock takes key's lock if it is free.
func (k *keyedMutex) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	if k.locks[key] != nil {
		return nil, false
	}
	e := &keyedEntry{refs: 1}
	e.mu.Lock()
	k.locks[key] = e
	return k.unlocker(key, e), true
}

func (k *keyedMutex) unlocker(key string, e *keyedEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

const (
	prefetchLayers = 2  // layers downloaded ahead of the one being applied
	prefetchChunks = 32 // of chunkSize: at most 8 MiB buffered per layer
	chunkSize      = 256 << 10
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// chunkPipe is an in-memory pipe holding up to depth chunks, so that its writer can
// run ahead of its reader.
type chunkPipe struct {
	ch     chan []byte
	cur    []byte        // unread part of buf
	buf    []byte        // a chunk from chunkPool, returned when read
	done   chan struct{} // closed by CloseRead: the writer stops
	once   sync.Once
	errMu  sync.Mutex
	werr   error
	closed bool
	diffID digest.Digest // set by download before it closes the pipe without error
}

func newChunkPipe(depth int) *chunkPipe {
	return &chunkPipe{ch: make(chan []byte, depth), done: make(chan struct{})}
}

// ReadFrom reads r in large chunks.
func (p *chunkPipe) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		buf := chunkPool.Get().(*[]byte)
		m, err := io.ReadFull(r, *buf)
		if m > 0 {
			select {
			case p.ch <- (*buf)[:m]:
				n += int64(m)
			case <-p.done:
				chunkPool.Put(buf)
				return n, io.ErrClosedPipe
			}
		} else {
			chunkPool.Put(buf)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// CloseWithError ends the stream; the reader gets err (or EOF) after the data.
func (p *chunkPipe) CloseWithError(err error) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.closed {
		return
	}
	p.closed, p.werr = true, err
	close(p.ch)
}

// CloseRead tells the writer to stop.
func (p *chunkPipe) CloseRead() { p.once.Do(func() { close(p.done) }) }

func (p *chunkPipe) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.buf != nil {
			full := p.buf[:cap(p.buf)]
			p.buf = nil
			chunkPool.Put(&full)
		}
		c, ok := <-p.ch
		if !ok {
			p.errMu.Lock()
			err := p.werr
			p.errMu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		p.cur, p.buf = c, c
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

var errNoManifest = errors.New("the image has no manifest for this platform with a config and layers to unpack")
