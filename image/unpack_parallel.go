package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/continuity/sysx"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

// Layers in parallel. Applied one on another, a pull's layers take turns: the second
// waits for the first's last file. On a snapshotter that can rebase (containerd 2.x's
// overlayfs, which advertises the "rebase" capability), each layer is instead
// extracted into a snapshot of its own, prepared without a parent, while the layers
// below it are still being extracted; the snapshots are then committed in order,
// each onto the one below it (Commit with snapshots.WithParent), as containerd's own
// unpacker does when its max_concurrent_unpacks is above 1.
//
// A parentless overlay snapshot is a plain directory (its mount is a bind): it is
// written as an overlay upper directory, whiteouts as overlay's (a 0/0 character
// device, the opaque xattr), as containerd's applier writes the upper directory of an
// overlay. One thing differs from applying onto the parent: a directory the layer's
// tar holds files in but has no entry of its own is made by the applier with mode
// 0755 and root's owner, where on the parent it takes the lower directory's mode,
// owner and extended attributes (archive.WithParents). containerd's parallel unpack
// leaves it at that; shimd copies them when it commits, from the parent chain, which
// exists by then (inheritDirs), so the layers come out as they would one by one.

// layersAtOnce is how many layers of a pull are extracted at once where layers can
// be (the one due next to be committed included): by default one per CPU, 3 to 6;
// one by one, a pull has as many in flight (one applied, two downloading ahead).
func layersAtOnce(setting int) int {
	if setting > 0 {
		return setting
	}
	return min(max(runtime.GOMAXPROCS(0), prefetchLayers+1), 6)
}

// unpackWindow is how many layers a pull into snapshotter extracts at once
// (above): 1 unless the snapshotter is overlayfs and containerd says
// it can rebase (containerd 2.x, not in a user namespace; not 1.6).
func (s *Service) unpackWindow(ctx context.Context, snapshotter string) int {
	if snapshotter != "overlayfs" || s.opts.UnpackLayers == 1 {
		return 1
	}
	if p, err := s.snapshotterPlugin(ctx, snapshotter); err != nil || !p.rebase {
		return 1 // on an error, asked again at the next pull
	}
	return layersAtOnce(s.opts.UnpackLayers)
}

// extraction is one layer being extracted into a parentless snapshot. Its fields
// are set by its goroutine before done is closed; committed by the committer.
type extraction struct {
	done      chan struct{}
	key       string // the active snapshot ("" when Prepare failed)
	upper     string // its directory
	diffID    digest.Digest
	implicit  []string // directories made for the tar's files with no entry of their own
	err       error
	committed bool
}

// extract starts extracting layer l from p into a new parentless snapshot.
func (u *streamUnpacker) extract(ctx context.Context, l layerRef, p *chunkPipe) *extraction {
	e := &extraction{done: make(chan struct{})}
	go func() {
		defer close(e.done)
		if e.err = u.extractInto(ctx, e, l, p); e.err != nil {
			p.CloseRead() // the download stops
		}
	}()
	return e
}

func (u *streamUnpacker) extractInto(ctx context.Context, e *extraction, l layerRef, p *chunkPipe) error {
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, uniquePart(), l.chainID)
	mounts, err := u.sn.Prepare(ctx, key, "", layerOpts(l)...)
	if err != nil {
		return fmt.Errorf("prepare snapshot: %w", err)
	}
	e.key = key
	if len(mounts) != 1 || mounts[0].Type != "bind" || readOnly(mounts[0].Options) {
		return fmt.Errorf("a parentless snapshot of %s mounts as %v, not one writable bind: %w", u.snapshotter, mounts, errdefs.ErrNotImplemented)
	}
	e.upper = mounts[0].Source
	var names tarNames
	opts := []archive.ApplyOpt{archive.WithFilter(names.record)}
	if l.parent != "" {
		// The image's first layer is applied as a bind: whiteouts there hide nothing.
		opts = append(opts, archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
	}
	e.diffID, err = applyStream(p, func(r io.Reader) error {
		_, err := archive.Apply(ctx, e.upper, r, opts...)
		return err
	})
	e.implicit = names.implicit()
	return err
}

// commit waits for the extraction of l and commits it onto l's parent.
func (u *streamUnpacker) commit(ctx context.Context, e *extraction, l layerRef) error {
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.err != nil {
		return e.err
	}
	opts := layerOpts(l)
	if l.parent != "" {
		if len(e.implicit) > 0 {
			if err := u.inheritDirs(ctx, e.upper, e.implicit, l.parent); err != nil {
				return fmt.Errorf("directories without entries: %w", err)
			}
		}
		opts = append(opts, snapshots.WithParent(l.parent))
	}
	var err error
	e.committed, err = u.commitLayer(ctx, l, e.key, e.diffID, opts)
	return err
}

// abort waits for the extraction and removes its snapshot unless it was committed.
func (u *streamUnpacker) abort(ctx context.Context, e *extraction) {
	<-e.done
	if e.committed || e.key == "" {
		return
	}
	if err := u.sn.Remove(context.WithoutCancel(ctx), e.key); err != nil && !errdefs.IsNotFound(err) {
		logRemoveFailed(ctx, e.key, err)
	}
}

// inheritDirs gives each directory of dirs (relative to upper) the mode, owner and
// extended attributes (not trusted.*) of the first directory of that path in the
// chain parent, top layer first, as the applier does on a parent (mkparent); where
// the first layer that has the path has something else there, or none does, the
// directory stays as it was made. A path that is not a directory in upper (the tar
// resolved it through a symbolic link of its own) is left alone.
func (u *streamUnpacker) inheritDirs(ctx context.Context, upper string, dirs []string, parent string) error {
	lowers, release, err := u.chainDirs(ctx, parent)
	if err != nil {
		return err
	}
	defer release()
	for _, d := range dirs {
		dst := filepath.Join(upper, d)
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			continue
		}
		for _, l := range lowers {
			src, err := fs.RootPath(l, d)
			if err != nil {
				return err
			}
			fi, err := os.Lstat(src)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if err := copyDirAttrs(dst, src, fi); err != nil {
					return err
				}
			}
			break
		}
	}
	return nil
}

// chainDirs are the directories of chain parent's layers, top first, from a view of
// it that release removes.
func (u *streamUnpacker) chainDirs(ctx context.Context, parent string) (dirs []string, release func(), err error) {
	key := "shimd-inherit-" + uniquePart()
	mounts, err := u.sn.View(ctx, key, parent)
	if err != nil {
		return nil, nil, fmt.Errorf("view %s: %w", parent, err)
	}
	release = func() {
		if err := u.sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
			logRemoveFailed(ctx, key, err)
		}
	}
	if len(mounts) == 1 {
		switch m := mounts[0]; m.Type {
		case "bind":
			return []string{m.Source}, release, nil
		case "overlay":
			if _, lower, _ := overlayDirs(m.Options); len(lower) > 0 {
				return lower, release, nil
			}
		}
	}
	release()
	return nil, nil, fmt.Errorf("a view of %s mounts as %v: %w", parent, mounts, errdefs.ErrNotImplemented)
}

// copyDirAttrs gives dst src's mode, owner and extended attributes but trusted.*
// (fi is src's). Its times stay: on a parent too they are those of its last entry
// made.
func copyDirAttrs(dst, src string, fi os.FileInfo) error {
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode()); err != nil {
		return err
	}
	names, err := sysx.LListxattr(src)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return fmt.Errorf("list xattrs of %s: %w", src, err)
	}
	for _, name := range names {
		if strings.HasPrefix(name, "trusted.") {
			continue
		}
		val, err := sysx.LGetxattr(src, name)
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get xattr %s of %s: %w", name, src, err)
		}
		if err := sysx.LSetxattr(dst, name, val, 0); err != nil {
			return fmt.Errorf("set xattr %s on %s: %w", name, dst, err)
		}
	}
	return nil
}

// tarNames records a tar's entries as the applier sees them (names cleaned), to find
// the directories it makes for entries whose directory has no entry of its own.
type tarNames struct {
	dirs    map[string]bool // directory entries
	parents map[string]bool // every entry's directory, and theirs
}

func (n *tarNames) record(h *tar.Header) (bool, error) {
	if n.dirs == nil {
		n.dirs, n.parents = map[string]bool{}, map[string]bool{}
	}
	name := path.Clean("/" + h.Name)
	if h.Typeflag == tar.TypeDir {
		n.dirs[name] = true
	}
	for d := path.Dir(name); d != "/" && !n.parents[d]; d = path.Dir(d) {
		n.parents[d] = true
	}
	return true, nil
}

// implicit lists the directories made for entries with no entry of their own,
// sorted.
func (n *tarNames) implicit() []string {
	var out []string
	for d := range n.parents {
		if !n.dirs[d] {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func logRemoveFailed(ctx context.Context, key string, err error) {
	log.G(ctx).WithError(err).WithField("key", key).Warn("remove extraction snapshot")
}
