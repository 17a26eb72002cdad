// Package ctrd holds the calls shimd makes straight through containerd's task and
// container services rather than through the client's Container methods: creating,
// starting, killing and deleting tasks, and writing records. The client reads the
// container record from containerd before each of its methods (NewTask reads it three
// times and asks the snapshotter for the mounts once more), although shimd made the
// record itself and holds what it needs; every read is a round trip that costs CPU
// in shimd and containerd and time on the pod start's path. The sandbox and container
// managers share these calls, and the few they make straight to a shim (shim.go); the
// record format itself is package record's.
package ctrd

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// WithSnapshotKey names an existing snapshot of snapshotter as the container's root
// filesystem, as client.WithSnapshot does without asking the snapshotter whether the
// key exists: the caller has just prepared it, and the task create fails clearly if it
// went away.
func WithSnapshotKey(snapshotter, key string) client.NewContainerOpts {
	return func(_ context.Context, _ *client.Client, c *containers.Container) error {
		c.Snapshotter, c.SnapshotKey = snapshotter, key
		return nil
	}
}

// NewTask creates the task of container id with rootfs (the mounts of its snapshot)
// and the stdio of ioCreate, in one call to containerd's task service. The runtime
// and its options are the container record's, which containerd reads itself. The
// returned IO is nil for a creator that makes none; on error it is closed.
func NewTask(ctx context.Context, ts tasks.TasksClient, id string, rootfs []mount.Mount, ioCreate cio.Creator) (cio.IO, uint32, error) {
	return NewTaskWithOptions(ctx, ts, id, rootfs, ioCreate, nil)
}

// NewTaskWithOptions is NewTask with task options, which replace the container's
// runtime options for this task (a restore from a checkpoint sets CRIU's paths).
func NewTaskWithOptions(ctx context.Context, ts tasks.TasksClient, id string, rootfs []mount.Mount, ioCreate cio.Creator, opts *anypb.Any) (cio.IO, uint32, error) {
	io, err := ioCreate(id)
	if err != nil {
		return nil, 0, err
	}
	cfg := io.Config()
	req := &tasks.CreateTaskRequest{
		ContainerID: id, Terminal: cfg.Terminal,
		Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr, Options: opts,
	}
	for _, m := range rootfs {
		req.Rootfs = append(req.Rootfs, &types.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	resp, err := ts.Create(ctx, req)
	if err != nil {
		io.Cancel()
		io.Close()
		return nil, 0, errgrpc.ToNative(err)
	}
	return io, resp.Pid, nil
}

// StartTask starts the created task of container id and returns its pid.
func StartTask(ctx context.Context, ts tasks.TasksClient, id string) (uint32, error) {
	resp, err := ts.Start(ctx, &tasks.StartRequest{ContainerID: id})
	if err != nil {
		return 0, errgrpc.ToNative(err)
	}
	return resp.Pid, nil
}

// Update writes extension name (as Put would) and labels of container id in one call,
// without reading the record first: the field paths name only what changes, and
// containerd keeps the rest of the record, other labels included.
func Update(ctx context.Context, cs containers.Store, id, name, typeURL string, v any, labels map[string]string) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", name, err)
	}
	c := containers.Container{
		ID:         id,
		Labels:     labels,
		Extensions: map[string]typeurl.Any{name: &anypb.Any{TypeUrl: typeURL, Value: data}},
	}
	paths := []string{"extensions." + name}
	for k := range labels {
		paths = append(paths, "labels."+k)
	}
	// The client's store answers native errors (errdefs classes) already.
	_, err = cs.Update(ctx, c, paths...)
	return err
}

// KillDeleteTask kills every process of the task of container id (SIGKILL), waits for
// it and deletes it, as the client's Task.Delete with WithProcessKill does, in three
// calls and without loading the container. A task that has exited is deleted; a
// missing one is fine.
func KillDeleteTask(ctx context.Context, ts tasks.TasksClient, id string) error {
	_, err := ts.Kill(ctx, &tasks.KillRequest{ContainerID: id, Signal: uint32(syscall.SIGKILL), All: true})
	switch err = errgrpc.ToNative(err); {
	case err == nil:
		if err := waitTask(ctx, ts, id); err != nil {
			return err
		}
	case errdefs.IsNotFound(err), errdefs.IsFailedPrecondition(err):
		// No task, or one whose process has exited (or, as the client notes, is
		// exiting: a kill may answer NotFound although it killed): the delete
		// below settles which.
	default:
		// The shim may have gone away under the call ("ttrpc: closed").
		if TaskGone(ctx, ts, id) {
			return nil
		}
		return fmt.Errorf("kill task %s: %w", id, err)
	}
	_, err = ts.Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id})
	if err = errgrpc.ToNative(err); err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	// A process still on its way out: wait for it, then delete again.
	if err := waitTask(ctx, ts, id); err != nil {
		return err
	}
	return DeleteStaleTask(ctx, ts, id)
}

// waitTask waits for the task's process to exit; a missing task is fine.
func waitTask(ctx context.Context, ts tasks.TasksClient, id string) error {
	if _, err := ts.Wait(ctx, &tasks.WaitRequest{ContainerID: id}); err != nil {
		if err = errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
			return fmt.Errorf("wait for task %s: %w", id, err)
		}
	}
	return nil
}

// DeleteExitedTask deletes the task of container id in one call when its process has
// exited (or it has none); a task that still runs is killed and deleted
// (KillDeleteTask).
func DeleteExitedTask(ctx context.Context, ts tasks.TasksClient, id string) error {
	_, err := ts.Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id})
	if err = errgrpc.ToNative(err); err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	return KillDeleteTask(ctx, ts, id)
}

// CreateContainer writes containerd's record of container id, made by opts, as the
// client's NewContainer does but without the lease the client takes for the call
// when ctx has none: a caller that prepares the snapshot only after the record names
// it needs none, and saves its two calls. The opts get no client (nil): shimd's and
// the client's that only fill in fields (runtime, spec, snapshot key, image name,
// sandbox, extensions and labels).
func CreateContainer(ctx context.Context, cs containers.Store, id string, opts ...client.NewContainerOpts) error {
	c := containers.Container{ID: id}
	for _, o := range opts {
		if err := o(ctx, nil, &c); err != nil {
			return err
		}
	}
	if c.Runtime.Name == "" {
		return fmt.Errorf("container %s: no runtime: %w", id, errdefs.ErrInvalidArgument)
	}
	_, err := cs.Create(ctx, c)
	return err
}
