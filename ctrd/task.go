package ctrd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// ContainerLoader loads containerd containers; *client.Client is one.
type ContainerLoader interface {
	LoadContainer(ctx context.Context, id string) (client.Container, error)
}

// LoadTask loads the containerd container id and its task. A missing container or
// task is an error of class NotFound (errdefs.IsNotFound), so that callers to whom
// "gone" means "nothing to do" test for that one class.
func LoadTask(ctx context.Context, cl ContainerLoader, id string) (client.Container, client.Task, error) {
	c, err := cl.LoadContainer(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("load container %s: %w", id, err)
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return c, nil, fmt.Errorf("load task of %s: %w", id, err)
	}
	return c, t, nil
}

// DeleteStaleTask deletes containerd's record of the task of id after loading it said
// NotFound. A delete cut short (its caller, shimd, was killed) can leave the task in
// containerd's list with its process already deleted by the shim: the shim then
// answers NotFound, so the task cannot be loaded, yet containerd keeps the shim
// running until someone deletes the task, which it does (shutting the shim down) on
// this call. A task containerd does not know is fine. containerd answers "ttrpc:
// closed" when the shim had already exited, after it dropped the task all the same:
// what counts is whether the task is gone.
func DeleteStaleTask(ctx context.Context, ts tasks.TasksClient, id string) error {
	_, err := ts.Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id})
	if err = errgrpc.ToNative(err); err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if TaskGone(ctx, ts, id) {
		return nil
	}
	return fmt.Errorf("delete stale task of %s: %w", id, err)
}

// TaskGone tells whether containerd answers NotFound for the task of id; any other
// answer, the task itself or an error, is no proof that it is gone.
func TaskGone(ctx context.Context, ts tasks.TasksClient, id string) bool {
	_, err := ts.Get(ctx, &tasks.GetRequest{ContainerID: id})
	return errdefs.IsNotFound(errgrpc.ToNative(err))
}
