package container

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// RemoveContainer kills a running container and deletes it with its writable layer.
// The log file stays (the kubelet owns it). Idempotent; unknown ids succeed.
func (s *Manager) Remove(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := s.containers.get(req.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.removeContainer(ctx, c); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (s *Manager) removeContainer(ctx context.Context, c *Container) error {
	ctx, cancel := s.detachedContext(ctx)
	defer cancel()
	if err := s.stopContainer(ctx, c, 0); err != nil {
		return err
	}
	if err := s.deleter.delete(ctx, c); err != nil {
		return err
	}
	if err := os.RemoveAll(s.dirs.containerDir(c.ID)); err != nil {
		return fmt.Errorf("remove container dir: %w", err)
	}
	os.RemoveAll(s.dirs.fifoDir(c.ID))
	s.containers.delete(c)
	log.G(ctx).WithField("container", c.ID).Info("container removed")
	s.events.Emit(c.ID, c.SandboxID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	s.nri.containerEvent(ctx, api.Event_REMOVE_CONTAINER, c)
	return nil
}

// StopPod kills every running container of a pod (StopPodSandbox).
func (s *Manager) StopPod(ctx context.Context, sandboxID string) error {
	for _, c := range s.containers.inSandbox(sandboxID) {
		if err := s.stopContainer(ctx, c, 0); err != nil {
			return err
		}
	}
	return nil
}

// RemovePod removes every container of a pod and its image volumes
// (RemovePodSandbox).
func (s *Manager) RemovePod(ctx context.Context, p pod.Pod) error {
	for _, c := range s.containers.inSandbox(p.ID) {
		if err := s.removeContainer(ctx, c); err != nil {
			return err
		}
	}
	rt, err := s.opts.Handlers.Get(p.RuntimeHandler)
	if err != nil {
		return err
	}
	return s.volumes.remove(ctx, p.ID, rt.Snapshotter)
}
