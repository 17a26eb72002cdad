package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkpointWorkDirName is the directory, in a container's directory, where one
// checkpoint is assembled before it is archived; it never outlives the request.
const checkpointWorkDirName = "checkpoint-work"

// Checkpoints is the container manager's checkpoint and restore part: it dumps
// running containers with CRIU through runc (CheckpointContainer, CheckpointPod) and
// makes new containers from a checkpoint (an archive, an image of one, or a
// CheckpointPod directory), restored at their start.
type Checkpoints struct {
	m    *Manager
	criu *criuChecker // whether CRIU can checkpoint and restore
}

// Checkpoint writes a checkpoint archive of a RUNNING container at location and
// leaves the container running. The archive has the layout containerd's CRI plugin
// writes, which checkpointctl reads:
//
//	checkpoint/       CRIU's images (runc checkpoint --leave-running --image-path)
//	dump.log          CRIU's log; stats-dump its statistics
//	config.dump       checkpointctl's ContainerConfig: id, name, the rootfs image
//	spec.dump         the container's OCI spec
//	status.dump       the CRI ContainerStatus at the checkpoint
//	rootfs-diff.tar   the writable layer's changes against the image (plain tar)
//	container.log     the container's CRI log so far
//
// The task is paused from before the dump until the writable layer has been read,
// so the process state and the files agree, and resumed whatever happens. The archive
// is written beside location and renamed into place: no partial archive is left.
//
// timeout (0: none) and the caller's context bound the call, not the dump: CRIU
// killed in the middle of a dump would leave the process seized or with CRIU's
// parasite in it. A caller that gives up gets its error at once; the dump goes on,
// its result is thrown away, and the task is resumed when it ends (within
// maxCheckpointTime). One checkpoint of a container runs at a time.
func (k *Checkpoints) Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error {
	c, err := k.m.containers.get(id)
	if err != nil {
		return err
	}
	if st := c.Status(); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("container %s is %s: only a running container can be checkpointed: %w",
			id, strings.TrimPrefix(st.State.String(), "CONTAINER_"), errdefs.ErrFailedPrecondition)
	}
	if err := k.criu.check(ctx); err != nil {
		return err
	}
	if !c.checkpointing.CompareAndSwap(false, true) {
		return fmt.Errorf("a checkpoint of container %s is in progress: %w", id, errdefs.ErrFailedPrecondition)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", id))
	done := make(chan error, 1)
	go func() {
		defer c.checkpointing.Store(false)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCheckpointTime)
		defer cancel()
		done <- k.checkpoint(dctx, ctx, c, location)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		log.G(ctx).WithError(ctx.Err()).Warn("checkpoint given up by its caller: the dump goes on and is thrown away")
		return fmt.Errorf("checkpoint of container %s: %w (the dump is thrown away when it ends; the container runs on)", id, ctx.Err())
	}
}

// maxCheckpointTime bounds a dump whose caller has gone.
const maxCheckpointTime = 30 * time.Minute

// checkpoint does the work of Checkpoint under ctx; the archive is only put in
// place while caller still waits.
func (k *Checkpoints) checkpoint(ctx, caller context.Context, c *Container, location string) error {
	start := time.Now()
	work := filepath.Join(k.m.dirs.containerDir(c.ID), checkpointWorkDirName)
	// A leftover of a checkpoint cut short by a crash of shimd goes first; RemoveAll
	// removes a link itself, never what it points to.
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(work)

	if err := k.dumpTask(ctx, c, work); err != nil {
		return err
	}
	if err := k.writeCheckpointFiles(ctx, c, work); err != nil {
		return err
	}
	if err := writeArchive(ctx, caller, work, location); err != nil {
		return err
	}
	log.G(ctx).WithField("location", location).WithField("took", time.Since(start).Round(time.Millisecond)).Info("container checkpointed")
	return nil
}

// dumpTask pauses the task, has runc dump it with CRIU into work/checkpoint (leaving
// it running), writes the writable layer's diff, and resumes the task.
func (k *Checkpoints) dumpTask(ctx context.Context, c *Container, work string) (retErr error) {
	if err := k.pauseTask(ctx, c); err != nil {
		return err
	}
	defer func() {
		if err := k.resumeTask(ctx, c); err != nil && retErr == nil {
			retErr = err
		}
	}()
	return k.dumpPaused(ctx, c, work)
}

func (k *Checkpoints) pauseTask(ctx context.Context, c *Container) error {
	if _, err := k.m.ctrd.TaskService().Pause(ctx, &tasksapi.PauseTaskRequest{ContainerID: c.ID}); err != nil {
		return fmt.Errorf("pause container %s: %w", c.ID, errgrpc.ToNative(err))
	}
	return nil
}

// resumeTask resumes a paused task, also when ctx is done.
func (k *Checkpoints) resumeTask(ctx context.Context, c *Container) error {
	rctx, cancel := k.m.detachedContext(ctx)
	defer cancel()
	if _, err := k.m.ctrd.TaskService().Resume(rctx, &tasksapi.ResumeTaskRequest{ContainerID: c.ID}); err != nil {
		err = errgrpc.ToNative(err)
		log.G(ctx).WithError(err).WithField("container", c.ID).Error("resume after checkpoint")
		return fmt.Errorf("resume container %s after its checkpoint: %w", c.ID, err)
	}
	return nil
}

// dumpPaused has runc dump a paused task with CRIU into work/checkpoint, leaving it
// running, and writes the writable layer's diff to work/rootfs-diff.tar.
func (k *Checkpoints) dumpPaused(ctx context.Context, c *Container, work string) error {
	opts, err := typeurl.MarshalAnyToProto(&options.CheckpointOptions{
		Exit:      false,
		ImagePath: filepath.Join(work, metadata.CheckpointDirectory),
		WorkPath:  work,
	})
	if err != nil {
		return err
	}
	if _, err := k.m.ctrd.TaskService().Checkpoint(ctx, &tasksapi.CheckpointTaskRequest{ContainerID: c.ID, Options: opts}); err != nil {
		err = errgrpc.ToNative(err)
		if ctx.Err() != nil {
			return fmt.Errorf("checkpoint container %s: %w: %v", c.ID, ctx.Err(), err)
		}
		// What CRIU refuses is the container's state (an established TCP connection,
		// an external resource): the caller's to change, not a fault of the runtime.
		return fmt.Errorf("checkpoint container %s: CRIU could not dump it: %s (%v): %w",
			c.ID, criuLogTail(filepath.Join(work, "dump.log")), err, errdefs.ErrFailedPrecondition)
	}
	f, err := os.OpenFile(filepath.Join(work, metadata.RootFsDiffTar), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := k.rootfsDiff(ctx, c, f); err != nil {
		return fmt.Errorf("writable layer of container %s: %w", c.ID, err)
	}
	return f.Close()
}

// rootfsDiff writes the changes of the container's writable layer against its image
// as a tar stream. An overlay layer's changes are its upper directory: only that is
// walked (as containerd's differ does for overlay upper dirs).
func (k *Checkpoints) rootfsDiff(ctx context.Context, c *Container, w io.Writer) error {
	sn := k.m.ctrd.SnapshotService(c.Snapshotter)
	upper, err := k.m.layers.rootfsMounts(ctx, c)
	if err != nil {
		return err
	}
	info, err := sn.Stat(ctx, c.ID)
	if err != nil {
		return err
	}
	lctx, done, err := k.m.ctrd.WithLease(ctx)
	if err != nil {
		return err
	}
	defer done(context.WithoutCancel(lctx))
	viewKey := fmt.Sprintf("%s-checkpoint-view-%d", c.ID, time.Now().UnixNano())
	var lower []mount.Mount
	if info.Parent != "" {
		if lower, err = sn.View(lctx, viewKey, info.Parent); err != nil {
			return fmt.Errorf("view of the image's layers: %w", err)
		}
		defer func() {
			if err := sn.Remove(context.WithoutCancel(lctx), viewKey); err != nil && !errdefs.IsNotFound(err) {
				log.G(ctx).WithError(err).Warn("remove checkpoint view")
			}
		}()
	}
	withLower := func(fn func(root string) error) error {
		if len(lower) == 0 {
			empty, err := os.MkdirTemp("", "shimd-empty-")
			if err != nil {
				return err
			}
			defer os.Remove(empty)
			return fn(empty)
		}
		return mount.WithReadonlyTempMount(ctx, lower, fn)
	}
	if dir := overlayUpperDir(upper); dir != "" {
		return withLower(func(lowerRoot string) error {
			cw := archive.NewChangeWriter(w, dir)
			if err := fs.DiffDirChanges(ctx, lowerRoot, dir, fs.DiffSourceOverlayFS, cw.HandleChange); err != nil {
				return err
			}
			return cw.Close()
		})
	}
	return withLower(func(lowerRoot string) error {
		return mount.WithReadonlyTempMount(ctx, upper, func(upperRoot string) error {
			return archive.WriteDiff(ctx, w, lowerRoot, upperRoot)
		})
	})
}

// overlayUpperDir is the upperdir of a single overlay mount, else "".
func overlayUpperDir(m []mount.Mount) string {
	if len(m) != 1 || m[0].Type != "overlay" {
		return ""
	}
	for _, o := range m[0].Options {
		if dir, ok := strings.CutPrefix(o, "upperdir="); ok {
			return dir
		}
	}
	return ""
}

// writeCheckpointFiles writes config.dump, spec.dump, status.dump and container.log.
func (k *Checkpoints) writeCheckpointFiles(ctx context.Context, c *Container, work string) error {
	status := toContainerStatus(c, c.Status())
	rec, err := k.m.ctrd.ContainerService().Get(ctx, c.ID)
	if err != nil {
		return fmt.Errorf("containerd container %s: %w", c.ID, err)
	}
	config := metadata.ContainerConfig{
		ID: c.ID, Name: c.Name, RootfsImage: c.ImageName, RootfsImageName: c.ImageName, RootfsImageRef: c.ImageRef,
		OCIRuntime: rec.Runtime.Name, CreatedTime: c.CreatedAt, CheckpointedAt: time.Now(),
	}
	files := map[string]any{metadata.ConfigDumpFile: config, metadata.StatusDumpFile: status}
	for name, v := range files {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(work, name), data, 0o600); err != nil {
			return err
		}
	}
	if rec.Spec == nil {
		return fmt.Errorf("containerd container %s has no spec", c.ID)
	}
	if err := os.WriteFile(filepath.Join(work, metadata.SpecDumpFile), rec.Spec.GetValue(), 0o600); err != nil {
		return err
	}
	if c.LogPath != "" {
		if err := copyRegularFile(c.LogPath, filepath.Join(work, "container.log")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("container log: %w", err)
		}
	}
	return nil
}

// copyRegularFile copies src, which must be a regular file (a link is refused, not
// followed), to a new file dst.
func copyRegularFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeArchive writes the tar of dir to a temporary file beside location, syncs it
// and links it to location (never replacing a file there), unless caller has given
// up by then.
func writeArchive(ctx, caller context.Context, dir, location string) (retErr error) {
	tmp, err := os.CreateTemp(filepath.Dir(location), "."+filepath.Base(location)+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint archive: %w", err)
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := archive.WriteDiff(ctx, tmp, "", dir); err != nil {
		return fmt.Errorf("checkpoint archive: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := caller.Err(); err != nil {
		return err
	}
	// A link, not a rename: a file that appeared at location since the request was
	// checked is never replaced.
	if err := os.Link(tmp.Name(), location); err != nil {
		if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("%s exists: %w", location, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("checkpoint archive: %w", err)
	}
	os.Remove(tmp.Name())
	return nil
}

// criuLogTail is the last lines of a CRIU log that say what went wrong.
func criuLogTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log: " + err.Error()
	}
	var errs []string
	for _, l := range strings.Split(string(data), "\n") {
		// Every dump logs "Can't setup RLIMIT_NOFILE", which is harmless.
		if (strings.Contains(l, "Error") || strings.Contains(l, "error")) && !strings.Contains(l, "RLIMIT_NOFILE") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		return lastLines(data, 3)
	}
	if len(errs) > 3 {
		errs = errs[len(errs)-3:]
	}
	return strings.Join(errs, "; ")
}
