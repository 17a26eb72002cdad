package runtime

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/runtime/spec"
)

// UpdateContainerResources changes the cgroup limits of a created or running
// container, and records them in its spec and config.
func (s *Service) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
	c, err := s.containers.get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	res := req.GetLinux()
	if res == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	st := c.Status().State
	if st != runtimeapi.ContainerState_CONTAINER_RUNNING && st != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, fmt.Errorf("container %s is %s: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	linux := spec.Resources(res, s.opts.MinOOMScoreAdj)
	cc, err := s.opts.Client.LoadContainer(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if err := cc.Update(ctx, func(ctx context.Context, _ *client.Client, rec *containers.Container) error {
		if err := spec.UpdateResources(rec, linux); err != nil {
			return err
		}
		return recordResources(rec, res)
	}); err != nil {
		return nil, fmt.Errorf("record resources of %s: %w", c.ID, err)
	}
	if st == runtimeapi.ContainerState_CONTAINER_RUNNING {
		task, err := cc.Task(ctx, nil)
		if err != nil {
			return nil, err
		}
		if err := task.Update(ctx, client.WithResources(linux)); err != nil {
			return nil, fmt.Errorf("update resources of %s: %w", c.ID, err)
		}
	}
	c.mu.Lock()
	c.resources = res
	c.mu.Unlock()
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// ReopenContainerLog reopens a running container's log after the kubelet rotated it.
func (s *Service) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.runningContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	cio := c.io
	c.mu.Unlock()
	if cio == nil || cio.log == nil {
		return nil, fmt.Errorf("container %s has no log to reopen: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if err := cio.log.reopen(); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
