package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
)

// pauseTasks are containerd's calls for pods' pause tasks: start, delete and read.
type pauseTasks struct{ client *client.Client }

// start creates and starts the pause task; it returns its pid and how long the
// create took (the shim's start included), for the log. rootfs nil: the task's
// mounts are read from the snapshotter, unless sb has none (SharedRootfs).
func (p pauseTasks) start(ctx context.Context, sb *Sandbox, rt pod.Handler, rootfs []mount.Mount) (uint32, time.Duration, error) {
	t0 := time.Now()
	if rootfs == nil && !sb.SharedRootfs {
		var err error
		if rootfs, err = p.client.SnapshotService(rt.Snapshotter).Mounts(ctx, sb.ID); err != nil {
			return 0, 0, fmt.Errorf("pause snapshot mounts: %w", err)
		}
	}
	if _, _, err := ctrd.NewTask(ctx, p.client.TaskService(), sb.ID, rootfs, cio.NullIO); err != nil {
		return 0, 0, fmt.Errorf("create pause task: %w", err)
	}
	tCreate := time.Since(t0)
	pid, err := ctrd.StartTask(ctx, p.client.TaskService(), sb.ID)
	if err != nil {
		return 0, tCreate, fmt.Errorf("start pause task: %w", err)
	}
	return pid, tCreate, nil
}

// delete kills and deletes the pause task; a missing task or container is fine.
func (p pauseTasks) delete(ctx context.Context, id string) error {
	if err := ctrd.KillDeleteTask(ctx, p.client.TaskService(), id); err != nil {
		return fmt.Errorf("pause task: %w", err)
	}
	return nil
}

// read reads the sandbox's pause task: its pid while it runs, and whether it
// runs or may (created, pausing, paused). The error says containerd told nothing of
// the task: containerd away, or the task's shim did not answer containerd's state
// call in time (2 s: containerd then answers DeadlineExceeded, or a state of
// "unknown"). A task containerd does not have is not running, not an error.
func (p pauseTasks) read(ctx context.Context, id string) (pid uint32, running bool, err error) {
	_, task, err := ctrd.LoadTask(ctx, p.client, id)
	if errdefs.IsNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	switch st.Status {
	case client.Running:
		return task.Pid(), true, nil
	case client.Created, client.Pausing, client.Paused:
		return 0, true, nil
	case client.Stopped:
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("pause task %s: containerd tells its state as %q", id, st.Status)
}
