package container

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer sends the stop signal (the config's, the image's, else SIGTERM), waits up to the
// timeout, then SIGKILL; timeout 0 kills at once. Idempotent; unknown ids succeed.
func (s *Manager) Stop(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := s.containers.get(req.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.stopContainer(ctx, c, time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (s *Manager) stopContainer(ctx context.Context, c *Container, grace time.Duration) error {
	if c.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	if grace > 0 {
		sig := stopSignalNumber(c.StopSignal)
		if err := s.exits.signal(ctx, c, sig); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warnf("send %s", sig)
		}
		select {
		case <-c.exited:
			return nil
		case <-time.After(grace):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.exits.signal(ctx, c, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
		// The container may have exited while the kill was on its way: its shim then
		// goes away under the call ("ttrpc: closed"). Its exit settles that.
		if exited, _ := s.waitExit(ctx, c, 2*time.Second); exited {
			return nil
		}
		return fmt.Errorf("kill container %s: %w", c.ID, err)
	}
	exited, err := s.waitExit(ctx, c, 30*time.Second)
	switch {
	case err != nil:
		return err
	case !exited:
		return fmt.Errorf("container %s did not exit after SIGKILL: %w", c.ID, errdefs.ErrUnavailable)
	}
	log.G(ctx).Info("container stopped")
	return nil
}

// waitExit waits up to d for the container's exit. If none is seen (the event may
// have been lost), it reads the container's own task and records an exit it finds.
func (s *Manager) waitExit(ctx context.Context, c *Container, d time.Duration) (bool, error) {
	select {
	case <-c.exited:
		return true, nil
	case <-time.After(d):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if ts, err := s.exits.taskState(ctx, c.ID); err == nil && !ts.running {
		s.exits.finish(ctx, c, ts.code, ts.at)
	}
	return c.Status().State == runtimeapi.ContainerState_CONTAINER_EXITED, nil
}
