package record

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/client"
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
