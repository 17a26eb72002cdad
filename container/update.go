package container

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/spec"
	"github.com/shimd/shimd/stats"
)

// UpdateContainerResources changes the cgroup limits of a created or running
// container, and records them in its spec and config.
func (s *Manager) UpdateResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.containers.get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	res := req.GetLinux()
	if res == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	if s.nri.on() {
		// NRI plugins may change what is applied.
		sb, err := s.opts.Pods.Pod(c.SandboxID)
		if err != nil {
			return nil, err
		}
		adj, err := s.nri.plugins.UpdateContainer(ctx, s.nri.pod(sb), nriContainer(c, s.nri.spec(ctx, c.ID)), toNRIResources(res, s.opts.MinOOMScoreAdj))
		if err != nil {
			return nil, fmt.Errorf("NRI plugins refused the update of %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
		}
		res = fromNRIResources(adj, res)
	}
	c.updateMu.Lock()
	err = s.updateResources(ctx, c, res)
	c.updateMu.Unlock()
	if err != nil {
		return nil, err
	}
	s.nri.containerEvent(ctx, api.Event_POST_UPDATE_CONTAINER, c)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// updateResources applies and records new limits of a created or running container.
func (s *Manager) updateResources(ctx context.Context, c *Container, res *runtimeapi.LinuxContainerResources) error {
	st := c.Status().State
	if st != runtimeapi.ContainerState_CONTAINER_RUNNING && st != runtimeapi.ContainerState_CONTAINER_CREATED {
		return fmt.Errorf("container %s is %s: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	if st == runtimeapi.ContainerState_CONTAINER_RUNNING {
		if err := checkMemoryLimit(ctx, s.opts.Client, c, res); err != nil {
			return err
		}
	}
	linux := spec.Resources(res, s.opts.MinOOMScoreAdj)
	cc, err := s.opts.Client.LoadContainer(ctx, c.ID)
	if err != nil {
		return err
	}
	if err := cc.Update(ctx, func(ctx context.Context, _ *client.Client, rec *containers.Container) error {
		if err := spec.UpdateResources(rec, linux, s.opts.Node.UnifiedCgroups); err != nil {
			return err
		}
		return recordResources(rec, res)
	}); err != nil {
		// The client's Update loses the class of a NotFound (it converts the error
		// from gRPC twice): a container removed meanwhile is asked about directly.
		if _, gerr := s.opts.Client.ContainerService().Get(ctx, c.ID); errdefs.IsNotFound(gerr) {
			return fmt.Errorf("container %s was removed: %v: %w", c.ID, err, errdefs.ErrNotFound)
		}
		return fmt.Errorf("record resources of %s: %w", c.ID, err)
	}
	if st == runtimeapi.ContainerState_CONTAINER_RUNNING {
		if err := updateTask(ctx, c, cc, linux); err != nil {
			return err
		}
	}
	c.setResources(res)
	return nil
}

// checkMemoryLimit refuses, before anything is recorded, a memory limit below what
// the running container holds and cannot give back (its working set): runc would
// refuse it.
func checkMemoryLimit(ctx context.Context, cl *client.Client, c *Container, res *runtimeapi.LinuxContainerResources) error {
	limit := res.GetMemoryLimitInBytes()
	if limit <= 0 {
		return nil
	}
	if ws, err := stats.WorkingSet(ctx, cl, c.ID); err == nil && ws > uint64(limit) {
		return invalid("linux.memory_limit_in_bytes", "%d is below the container's current memory use of %d bytes", limit, ws)
	}
	return nil
}

// updateTask applies new limits to a running container's cgroup; a task that ended
// meanwhile is FailedPrecondition, a memory limit runc refuses InvalidArgument.
func updateTask(ctx context.Context, c *Container, cc client.Container, linux *specs.LinuxResources) error {
	task, err := cc.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("container %s is no longer running: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("task of %s: %w", c.ID, err)
	}
	if err := task.Update(ctx, client.WithResources(linux)); err != nil {
		if st, serr := task.Status(ctx); errdefs.IsNotFound(serr) || (serr == nil && st.Status != client.Running) {
			return fmt.Errorf("update resources of %s: it stopped meanwhile: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
		}
		if strings.Contains(err.Error(), "unable to set memory limit") {
			return fmt.Errorf("update resources of %s: %v: %w", c.ID, err, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("update resources of %s: %w", c.ID, err)
	}
	return nil
}

// ReopenContainerLog reopens a running container's log after the kubelet rotated it.
func (s *Manager) ReopenLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.containers.running(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	cio := c.IO()
	if cio == nil || cio.log == nil {
		return nil, fmt.Errorf("container %s has no log to reopen: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if err := cio.log.reopen(); err != nil {
		// The log's directory or file cannot be made: the node's state, not the request.
		return nil, fmt.Errorf("reopen log of container %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
