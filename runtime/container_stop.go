package runtime

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/moby/sys/signal"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer sends the image's STOPSIGNAL (default SIGTERM), waits up to the
// timeout, then SIGKILL; timeout 0 kills at once. Idempotent; unknown ids succeed.
func (s *Service) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := validateID("container_id", req.GetContainerId()); err != nil {
		return nil, err
	}
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

func (s *Service) stopContainer(ctx context.Context, c *Container, grace time.Duration) error {
	if c.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	if grace > 0 {
		sig := syscall.SIGTERM
		if c.StopSignal != "" {
			if parsed, err := signal.ParseSignal(c.StopSignal); err == nil {
				sig = parsed
			}
		}
		if err := s.signal(ctx, c, sig); err != nil && !errdefs.IsNotFound(err) {
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
	if err := s.signal(ctx, c, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill container %s: %w", c.ID, err)
	}
	select {
	case <-c.exited:
		log.G(ctx).Info("container stopped")
		return nil
	case <-time.After(30 * time.Second):
		// The exit event may have been lost: read the task state ourselves.
		s.Resync(ctx)
		if c.Status().State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return nil
		}
		return fmt.Errorf("container %s did not exit after SIGKILL: %w", c.ID, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}
