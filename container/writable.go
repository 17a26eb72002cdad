package container

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// A split image filesystem (KEP-4191, config key container_fs_dir): the image layers
// stay in the snapshotter's directory, the containers' writable layers go to
// another filesystem. containerd's overlayfs snapshotter keeps committed and active
// snapshots in one directory, so in split mode shimd makes the writable layer itself:
//
//	snapshotter:      View(<container id>, <image chain id>)  read-only lowerdirs;
//	                  containerd's container record names it, so the image's layers
//	                  stay referenced while the container exists
//	container_fs_dir: <container id>/fs    the overlay upperdir (the container's writes)
//	                  <container id>/work  the overlay workdir
//
// and the task gets one overlay mount: lowerdir from the view, upperdir and workdir
// from container_fs_dir (upper and work must share a filesystem; the lowers need not).
//
// Lifecycle: the directory is made before the view and the record, and removed after
// the containerd container is deleted (deleter.delete). Recovery removes
// every directory of container_fs_dir whose container shimd does not know
// (dirs.removeOrphans): a create or a removal cut short by a crash leaves none behind.
//
// Pods with a user namespace keep the snapshotter's writable layer (its ID-mapping
// labels make the layer; see snapshotOpts), on the image filesystem.

const (
	writableUpper = "fs"
	writableWork  = "work"
)

// writableLayers makes, mounts and sweeps the containers' writable layers. It uses
// nothing of the Manager but its containerd client, its containers (to tell an
// orphan) and its cleanup timeout.
type writableLayers struct {
	ctrd           containerdAPI
	fsDir          string // container_fs_dir; "": the snapshotter's layers
	containers     *containerStore
	cleanupTimeout time.Duration
}

// dirOf is the directory of container id's writable layer in split mode; "" when
// split mode is off or the pod keeps the snapshotter's layer.
func (w *writableLayers) dirOf(id string, opts []snapshots.Opt) string {
	if w.fsDir == "" || len(opts) > 0 {
		return ""
	}
	return filepath.Join(w.fsDir, id)
}

// make sets d.c.WritableDir and d.prepare, which makes the container's writable
// layer over the image's layers (chain id d.parent), and returns its undo: the
// snapshotter's layer, or in split mode a view of the image's layers with an overlay
// on WritableDir (made here, before any snapshot or record names it).
func (w *writableLayers) make(ctx context.Context, d *draft) (undo func(), err error) {
	c, img, rt, parent := d.c, d.img, d.rt, d.parent
	sn := w.ctrd.SnapshotService(rt.Snapshotter)
	snOpts := snapshotOpts(d.sb)
	c.WritableDir = w.dirOf(c.ID, snOpts)
	undoDir := func() {}
	if c.WritableDir != "" {
		if undoDir, err = makeWritableDir(c.WritableDir); err != nil {
			return nil, err
		}
	}
	makeSnapshot := func(ctx context.Context) ([]mount.Mount, error) {
		if c.WritableDir != "" {
			return sn.View(ctx, c.ID, parent)
		}
		return sn.Prepare(ctx, c.ID, parent, snOpts...)
	}
	d.prepare = func(ctx context.Context) ([]mount.Mount, error) {
		// The image's layers are nearly always unpacked for the snapshotter: prepare
		// first, and unpack only when the parent is missing.
		mounts, err := makeSnapshot(ctx)
		if errdefs.IsNotFound(err) {
			if err := ensureUnpacked(ctx, w.ctrd, img, rt.Snapshotter, parent); err != nil {
				return nil, err
			}
			mounts, err = makeSnapshot(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("prepare writable layer: %w", err)
		}
		if c.WritableDir != "" {
			return splitOverlay(mounts, c.WritableDir)
		}
		return mounts, nil
	}
	undo = func() {
		cctx, cancel := detached(ctx, w.cleanupTimeout)
		defer cancel()
		if err := sn.Remove(cctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warn("undo writable layer")
		}
		undoDir()
	}
	return undo, nil
}

// makeWritableDir creates dir's upper and work directories; the undo removes dir.
func makeWritableDir(dir string) (func(), error) {
	for _, d := range []string{writableUpper, writableWork} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("make writable layer directory: %w", err)
		}
	}
	return func() { os.RemoveAll(dir) }, nil
}

// removeWritableDir removes c's writable layer in split mode; a missing one is fine.
func removeWritableDir(c *Container) error {
	if c.WritableDir == "" {
		return nil
	}
	if err := os.RemoveAll(c.WritableDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove writable layer of container %s: %w", c.ID, err)
	}
	return nil
}

// WritableUpper is the directory of the container's own writes in split mode ("" when
// its writable layer is a snapshot).
func (c *Container) WritableUpper() string {
	if c.WritableDir == "" {
		return ""
	}
	return filepath.Join(c.WritableDir, writableUpper)
}

// writableFs is a path on the filesystem of the split writable layer ("" when none):
// container_fs_dir.
func (c *Container) writableFs() string {
	if c.WritableDir == "" {
		return ""
	}
	return filepath.Dir(c.WritableDir)
}

// rootfsMounts are the mounts of c's root filesystem, asked of the snapshotter (and
// turned into the split overlay when c's writable layer is its own directory).
func (w *writableLayers) rootfsMounts(ctx context.Context, c *Container) ([]mount.Mount, error) {
	m, err := w.ctrd.SnapshotService(c.Snapshotter).Mounts(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if c.WritableDir == "" {
		return m, nil
	}
	return splitOverlay(m, c.WritableDir)
}

// splitOverlay turns the mounts of a read-only view of the image's layers into one
// writable overlay whose upperdir and workdir are under dir. The overlayfs
// snapshotter's view is a read-only bind mount of the one layer, or an overlay with a
// lowerdir list; options other than those of a read-only mount are kept.
func splitOverlay(view []mount.Mount, dir string) ([]mount.Mount, error) {
	if len(view) != 1 {
		return nil, fmt.Errorf("view of the image's layers has %d mounts, want 1: %w", len(view), errdefs.ErrNotImplemented)
	}
	v := view[0]
	var lower string
	var opts []string
	switch v.Type {
	case "bind":
		lower = v.Source
	case "overlay":
	default:
		return nil, fmt.Errorf("view of the image's layers is a %q mount; a split writable layer needs the overlayfs snapshotter: %w", v.Type, errdefs.ErrNotImplemented)
	}
	for _, o := range v.Options {
		switch {
		case o == "ro" || o == "rw" || o == "rbind" || o == "bind":
		case strings.HasPrefix(o, "lowerdir="):
			lower = strings.TrimPrefix(o, "lowerdir=")
		case strings.HasPrefix(o, "upperdir=") || strings.HasPrefix(o, "workdir="):
			return nil, fmt.Errorf("view of the image's layers is writable: %w", errdefs.ErrFailedPrecondition)
		default:
			opts = append(opts, o)
		}
	}
	if lower == "" {
		return nil, fmt.Errorf("view of the image's layers names no layer: %w", errdefs.ErrFailedPrecondition)
	}
	opts = append([]string{
		"workdir=" + filepath.Join(dir, writableWork),
		"upperdir=" + filepath.Join(dir, writableUpper),
		"lowerdir=" + lower,
	}, opts...)
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: opts}}, nil
}

// removeOrphans deletes the writable layers in container_fs_dir of containers shimd
// does not know (a create or a removal cut short).
func (w *writableLayers) removeOrphans(ctx context.Context) {
	if w.fsDir == "" {
		return
	}
	entries, err := os.ReadDir(w.fsDir)
	if err != nil {
		log.G(ctx).WithError(err).Warn("read container_fs_dir")
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !isContainerID(e.Name()) {
			continue // not shimd's (lost+found of a filesystem's root)
		}
		if c, err := w.containers.get(e.Name()); err == nil && c.ID == e.Name() {
			continue
		}
		log.G(ctx).WithField("container", e.Name()).Info("removing orphaned writable layer")
		if err := os.RemoveAll(filepath.Join(w.fsDir, e.Name())); err != nil {
			log.G(ctx).WithError(err).Warn("remove orphaned writable layer")
		}
	}
}

// isContainerID: name has the form of the ids shimd gives (64 hex digits).
func isContainerID(name string) bool {
	if len(name) != 64 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}
