package container

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/cgroup"
	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/ctrd"
)

// deleter removes what a container holds in containerd: its task, its cgroup, its
// writable layer, its containerd container and its record in the sandbox store; and,
// when that fails, retries it with the container's directories (later).
type deleter struct {
	ctrd     containerdAPI
	gates    *podGates   // a pause-less pod's task deletes wait for its creates
	keeper   *exitKeeper // the records in the sandbox store
	pods     Pods
	dirs     dirs
	cleanups *cleanup.Queue // nil: nothing is retried
	// cleanupTimeout bounds an undo detached from its request.
	cleanupTimeout time.Duration
	// cgroupDriver and namespace name the cgroup of a container whose pod is gone.
	cgroupDriver, namespace string
}

// later deletes c from containerd with its directories, again and again until it
// succeeds (Options.Cleanups): the delete just failed (a shim still busy, containerd
// away).
func (d *deleter) later(c *Container) {
	if d.cleanups == nil {
		return
	}
	d.cleanups.Add("container "+c.ID, func(ctx context.Context) error {
		if err := d.delete(ctx, c); err != nil {
			return err
		}
		os.RemoveAll(d.dirs.containerDir(c.ID))
		os.RemoveAll(d.dirs.fifoDir(c.ID))
		return nil
	})
}

// delete deletes the containerd container, its writable layer and its record in the
// sandbox store (exit_keep.go, after the task); a missing one is fine.
func (d *deleter) delete(ctx context.Context, c *Container) error {
	if err := d.containerd(ctx, c); err != nil {
		return err
	}
	// A split writable layer (writable.go) goes after the container that mounts it.
	if err := removeWritableDir(c); err != nil {
		return err
	}
	return d.keeper.release(ctx, c.ID)
}

// containerd deletes c's task, cgroup, snapshot and containerd container.
func (d *deleter) containerd(ctx context.Context, c *Container) error {
	if !c.taskDeleted.Load() {
		if err := d.gates.deleting(c.SandboxID, func() error { return ctrd.DeleteExitedTask(ctx, d.ctrd.TaskService(), c.ID) }); err != nil {
			return fmt.Errorf("delete task of container %s: %w", c.ID, err)
		}
	}
	// runc removes the cgroup with the task, unless a crash cut it short; a process
	// left in it (the runc init of a create that finished after containerd gave up
	// on it) is killed.
	if _, err := cgroup.Clear(ctx, d.cgroupDir(ctx, c)); err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Warn("remove cgroup")
	}
	if c.Snapshotter != "" {
		// The writable layer's key is the container's id; the record goes after it,
		// as the client's WithSnapshotCleanup does, without reading it again.
		err := d.ctrd.SnapshotService(c.Snapshotter).Remove(ctx, c.ID)
		if err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete writable layer of container %s: %w", c.ID, err)
		}
		if err == nil {
			if err := d.ctrd.ContainerService().Delete(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("delete container %s: %w", c.ID, err)
			}
			return nil
		}
	}
	// No layer where the record says: the client's way, from containerd's record.
	cc, err := d.ctrd.LoadContainer(ctx, c.ID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := cc.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", c.ID, err)
	}
	return nil
}

// undoRecords deletes what a failed create made of c's records: containerd's
// container record and c's record in the sandbox store (exit_keep.go). One that
// cannot be deleted now is retried by the cleanup queue.
func (d *deleter) undoRecords(ctx context.Context, c *Container, container, kept bool) {
	cctx, cancel := detached(ctx, d.cleanupTimeout)
	defer cancel()
	var err error
	if container {
		if err = d.ctrd.ContainerService().Delete(cctx, c.ID); errdefs.IsNotFound(err) {
			err = nil
		}
	}
	if kept && err == nil {
		err = d.keeper.release(cctx, c.ID)
	}
	if err != nil {
		log.G(ctx).WithError(err).Warn("undo containerd container; will retry")
		d.later(c)
	}
}

// cgroupDir is the container's cgroup (cgroup.Dir, as for its pod's pause task), from
// its pod's config or, when the pod is gone, from the spec containerd holds.
func (d *deleter) cgroupDir(ctx context.Context, c *Container) string {
	if sb, err := d.pods.Pod(c.SandboxID); err == nil {
		return cgroup.Dir(sb.Config.GetLinux().GetCgroupParent(), c.ID, d.cgroupDriver, d.namespace)
	}
	if d.cgroupDriver == "systemd" {
		return ""
	}
	cc, err := d.ctrd.LoadContainer(ctx, c.ID)
	if err != nil {
		return ""
	}
	sp, err := cc.Spec(ctx)
	if err != nil || sp.Linux == nil {
		return ""
	}
	return sp.Linux.CgroupsPath
}
