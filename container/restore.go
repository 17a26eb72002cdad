package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// restoreDirName is the directory, in a container's directory, that holds the
// unpacked checkpoint a CREATED container is restored from at StartContainer. Its
// checkpoint/ subdirectory is what marks the container as one to restore; it is
// removed once the container runs.
const restoreDirName = "restore"

// checkpointSource is a checkpoint archive unpacked for CreateContainer.
type checkpointSource struct {
	archive string // the archive's path, as the request gave it
	dir     string // where it is unpacked (moved into the container's directory)
	config  *metadata.ContainerConfig
	// strict: the request's config must describe the checkpointed process (a pod
	// restore: cri-api's RestorePod), checked by checkProcess.
	strict bool
}

// checkProcess fails a strict restore whose new spec names another process than
// the checkpoint's spec.dump: its arguments, working directory, user and group.
// (The environment is not compared: the kubelet's service variables change with the
// cluster.)
func (cs *checkpointSource) checkProcess(sp *specs.Spec) error {
	if !cs.strict {
		return nil
	}
	old, _, err := metadata.ReadContainerCheckpointSpecDump(cs.dir)
	if err != nil {
		return fmt.Errorf("%s of %s: %v: %w", metadata.SpecDumpFile, cs.archive, err, errdefs.ErrInvalidArgument)
	}
	was, now := old.Process, sp.Process
	switch {
	case was == nil || now == nil:
		return nil
	case !slices.Equal(was.Args, now.Args):
		return fmt.Errorf("config: the command %q is not the checkpointed process's %q: %w", now.Args, was.Args, errdefs.ErrInvalidArgument)
	case was.Cwd != now.Cwd:
		return fmt.Errorf("config.working_dir: %q is not the checkpointed process's %q: %w", now.Cwd, was.Cwd, errdefs.ErrInvalidArgument)
	case was.User.UID != now.User.UID || was.User.GID != now.User.GID:
		return fmt.Errorf("config: user %d:%d is not the checkpointed process's %d:%d: %w",
			now.User.UID, now.User.GID, was.User.UID, was.User.GID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// isCheckpointArchive tells whether CreateContainer's image names a checkpoint
// archive on the node rather than an image: an absolute path. Image references are
// never absolute paths.
func isCheckpointArchive(image string) bool {
	return strings.HasPrefix(image, "/")
}

// openCheckpoint unpacks the checkpoint archive at path (a tar, or a gzip'd tar) into
// a new directory under shimd's root dir and reads its config.dump. The archive is
// unpacked with containerd's layer applier, which keeps every entry under the
// directory. A path that is not there is NotFound; a file that is not a checkpoint
// archive InvalidArgument.
func (k *Checkpoints) openCheckpoint(ctx context.Context, path string) (*checkpointSource, error) {
	if filepath.Clean(path) != path {
		return nil, fmt.Errorf("config.image.image: checkpoint archive %q is not a clean path: %w", path, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint archive %s: %w", path, errdefs.ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("checkpoint archive %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint archive %s is not a regular file: %w", path, errdefs.ErrInvalidArgument)
	}
	return k.unpackCheckpoint(path, func(dir string) error {
		r, err := compression.DecompressStream(f)
		if err != nil {
			return fmt.Errorf("checkpoint archive %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
		}
		defer r.Close()
		if _, err := archive.Apply(ctx, dir, r); err != nil {
			return fmt.Errorf("checkpoint archive %s cannot be unpacked: %v: %w", path, err, errdefs.ErrInvalidArgument)
		}
		return nil
	})
}

// unpackCheckpoint fills a new directory beside the containers' directories with
// fill (a rename later moves it into one), checks it as a checkpoint of source and
// reads its config.dump. On failure the directory is removed.
func (k *Checkpoints) unpackCheckpoint(source string, fill func(dir string) error) (_ *checkpointSource, retErr error) {
	if err := os.MkdirAll(filepath.Join(k.m.dirs.root, containerDirName), 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(filepath.Join(k.m.dirs.root, containerDirName), ".restore-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := fill(dir); err != nil {
		return nil, err
	}
	return readCheckpoint(source, dir)
}

// readCheckpoint checks an unpacked checkpoint of source and reads its config.dump.
func readCheckpoint(source, dir string) (*checkpointSource, error) {
	if fi, err := os.Lstat(filepath.Join(dir, metadata.CheckpointDirectory)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a checkpoint: it has no %s/ directory: %w", source, metadata.CheckpointDirectory, errdefs.ErrInvalidArgument)
	}
	config, _, err := metadata.ReadContainerCheckpointConfigDump(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not a checkpoint: %v: %w", source, err, errdefs.ErrInvalidArgument)
	}
	if config.RootfsImageRef == "" && config.RootfsImageName == "" {
		return nil, fmt.Errorf("checkpoint %s names no image in %s: %w", source, metadata.ConfigDumpFile, errdefs.ErrInvalidArgument)
	}
	return &checkpointSource{archive: source, dir: dir, config: config}, nil
}

// createImage resolves CreateContainer's image: an image on the node, or a
// checkpoint to restore (a checkpoint archive's path, or an image made of one, with
// the org.criu.checkpoint.container.name annotation), then the image the
// checkpointed container ran. It returns the image, the name the container
// reports, and the checkpoint if any (its close removes what was unpacked).
func (k *Checkpoints) createImage(ctx context.Context, sb pod.Pod, rt pod.Handler, ref, fromDir string) (_ *image.Image, _ string, _ *checkpointSource, retErr error) {
	var img *image.Image
	if !isCheckpointArchive(ref) {
		var err error
		if img, err = k.m.opts.Images.Find(ctx, ref); err != nil {
			return nil, "", nil, err
		}
		if img.Annotations[metadata.CheckpointAnnotationName] == "" && fromDir == "" {
			return img, ref, nil, nil
		}
	}
	// A checkpoint: the container runs the checkpointed image with the checkpoint's
	// writable layer, and StartContainer restores its processes.
	if sb.UserNamespace() != nil {
		return nil, "", nil, fmt.Errorf("restoring a checkpoint into a pod with its own user namespace is not supported: %w", errdefs.ErrFailedPrecondition)
	}
	if _, isRunc := rt.Options.(*options.Options); !isRunc {
		return nil, "", nil, fmt.Errorf("restoring a checkpoint needs a runc runtime handler, not %q: %w", rt.Type, errdefs.ErrFailedPrecondition)
	}
	if err := k.criu.check(ctx); err != nil {
		return nil, "", nil, err
	}
	var cs *checkpointSource
	var err error
	switch {
	case fromDir != "":
		if cs, err = k.copyCheckpoint(fromDir); err == nil {
			cs.strict = true
		}
	case img == nil:
		cs, err = k.openCheckpoint(ctx, ref)
	default:
		cs, err = k.openCheckpointImage(ctx, img, ref, rt.Snapshotter)
	}
	if err != nil {
		return nil, "", nil, err
	}
	defer func() {
		if retErr != nil {
			cs.close()
		}
	}()
	cimg, name, err := k.checkpointImage(ctx, cs)
	if err != nil {
		return nil, "", nil, err
	}
	if fromDir != "" {
		// A pod restore names the image: it must be the checkpointed one.
		if img == nil || img.ID != cimg.ID {
			return nil, "", nil, fmt.Errorf("config.image.image: %q is not the image the checkpointed container ran (%s, %s): %w",
				ref, name, cimg.ID, errdefs.ErrInvalidArgument)
		}
		name = ref
	}
	return cimg, name, cs, nil
}

// copyCheckpoint copies an unpacked container checkpoint (of a pod checkpoint),
// which a restore must not change.
func (k *Checkpoints) copyCheckpoint(src string) (*checkpointSource, error) {
	return k.unpackCheckpoint(src, func(dir string) error {
		if err := fs.CopyDir(dir, src); err != nil {
			return fmt.Errorf("copy checkpoint %s: %w", src, err)
		}
		return nil
	})
}

// openCheckpointImage copies the checkpoint out of an image made of a checkpoint
// archive (its layers hold the archive's files at /), as openCheckpoint unpacks one.
func (k *Checkpoints) openCheckpointImage(ctx context.Context, img *image.Image, ref, snapshotter string) (*checkpointSource, error) {
	chainID := identity.ChainID(img.Config.RootFS.DiffIDs).String()
	if err := ensureUnpacked(ctx, k.m.ctrd, img, snapshotter, chainID); err != nil {
		return nil, err
	}
	return k.unpackCheckpoint(ref, func(dir string) error {
		lctx, done, err := k.m.ctrd.WithLease(ctx)
		if err != nil {
			return err
		}
		defer done(context.WithoutCancel(lctx))
		sn := k.m.ctrd.SnapshotService(snapshotter)
		key := fmt.Sprintf("checkpoint-image-view-%d", time.Now().UnixNano())
		mounts, err := sn.View(lctx, key, chainID)
		if err != nil {
			return fmt.Errorf("view of checkpoint image %s: %w", ref, err)
		}
		defer sn.Remove(context.WithoutCancel(lctx), key)
		if err := mount.WithReadonlyTempMount(lctx, mounts, func(root string) error {
			return fs.CopyDir(dir, root)
		}); err != nil {
			return fmt.Errorf("copy the checkpoint out of image %s: %w", ref, err)
		}
		return nil
	})
}

// checkpointImage finds the image the checkpointed container ran, by its reference
// (a digest or an image id) and else by its name, and returns it with the name the
// restored container reports. Not on the node: NotFound.
func (k *Checkpoints) checkpointImage(ctx context.Context, cs *checkpointSource) (*image.Image, string, error) {
	name := cs.config.RootfsImageName
	for _, ref := range []string{cs.config.RootfsImageRef, name} {
		if ref == "" {
			continue
		}
		img, err := k.m.opts.Images.Find(ctx, ref)
		if err == nil {
			if name == "" {
				name = ref
			}
			return img, name, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("image %s (%s) of checkpoint %s is not on the node: pull it first: %w",
		name, cs.config.RootfsImageRef, cs.archive, errdefs.ErrNotFound)
}

// close removes the unpacked checkpoint unless it was moved into a container.
func (cs *checkpointSource) close() {
	if cs != nil && cs.dir != "" {
		os.RemoveAll(cs.dir)
	}
}

// applyCheckpoint puts the checkpointed writable layer's changes into the new one
// and moves the unpacked checkpoint into the container's directory.
func (k *Checkpoints) applyCheckpoint(ctx context.Context, c *Container, rootfs []mount.Mount) error {
	cs := c.restore
	diff := filepath.Join(cs.dir, metadata.RootFsDiffTar)
	if f, err := os.Open(diff); err == nil {
		defer f.Close()
		r, err := compression.DecompressStream(f)
		if err != nil {
			return fmt.Errorf("%s of %s: %v: %w", metadata.RootFsDiffTar, cs.archive, err, errdefs.ErrInvalidArgument)
		}
		defer r.Close()
		if err := mount.WithTempMount(ctx, rootfs, func(root string) error {
			_, err := archive.Apply(ctx, root, r)
			return err
		}); err != nil {
			return fmt.Errorf("apply %s of %s: %w", metadata.RootFsDiffTar, cs.archive, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dst := filepath.Join(k.m.dirs.containerDir(c.ID), restoreDirName)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := os.Rename(cs.dir, dst); err != nil {
		return err
	}
	cs.dir = ""
	log.G(ctx).WithField("archive", cs.archive).Info("container to be restored from a checkpoint")
	return nil
}

// restoreOptions returns, for a container created from a checkpoint, the task
// options that make runc restore it at start (the handler's runc options with CRIU's
// image and work paths), and the directory to remove once it runs; nil and "" for
// any other container.
func (k *Checkpoints) restoreOptions(ctx context.Context, c *Container) (*anypb.Any, string, error) {
	dir := filepath.Join(k.m.dirs.containerDir(c.ID), restoreDirName)
	if _, err := os.Lstat(filepath.Join(dir, metadata.CheckpointDirectory)); err != nil {
		return nil, "", nil
	}
	if err := k.criu.check(ctx); err != nil {
		return nil, "", err
	}
	sb, err := k.m.opts.Pods.Pod(c.SandboxID)
	if err != nil {
		return nil, "", err
	}
	rt, err := k.m.opts.Handlers.Get(sb.RuntimeHandler)
	if err != nil {
		return nil, "", err
	}
	ro, ok := rt.Options.(*options.Options)
	if !ok {
		return nil, "", fmt.Errorf("container %s is to be restored from a checkpoint, which needs a runc handler, not %q: %w",
			c.ID, rt.Type, errdefs.ErrFailedPrecondition)
	}
	o := proto.Clone(ro).(*options.Options)
	o.CriuImagePath = filepath.Join(dir, metadata.CheckpointDirectory)
	o.CriuWorkPath = dir
	a, err := typeurl.MarshalAnyToProto(o)
	if err != nil {
		return nil, "", err
	}
	return a, dir, nil
}

// restoreError explains a failed restore. What CRIU refuses is the new container's
// surroundings (a process id of the checkpoint taken in a PID namespace the container
// shares, a missing mount): FailedPrecondition, with CRIU's error lines.
func restoreError(err error, criuLog string) error {
	hint := ""
	if strings.Contains(criuLog, "Can't fork for") && strings.Contains(criuLog, "File exists") {
		hint = "; a process id of the checkpoint is in use in the PID namespace the container joins (its pod's, when " +
			"the pod shares one): restore it into a pod where those ids are free, or with a PID namespace of its own"
	}
	return fmt.Errorf("restore from checkpoint: %v (CRIU: %s)%s: %w", err, criuLog, hint, errdefs.ErrFailedPrecondition)
}
