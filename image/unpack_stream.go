package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// A layer's bytes on their way from the registry to its snapshot: fetched, checked
// and decompressed into a chunkPipe (download), read out of it with the diff id
// checked (applyStream, verifying) and extracted onto the snapshot's mounts (apply).

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

// applyStream applies the tar stream download writes into p with apply (to a
// snapshot's mounts, or an extraction's directory), and returns its diff id once
// download has checked the blob. Until the caller commits the snapshot, a bad blob
// leaves nothing behind.
func applyStream(p *chunkPipe, apply func(io.Reader) error) (digest.Digest, error) {
	if err := apply(p); err != nil {
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
