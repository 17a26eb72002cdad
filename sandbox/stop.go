package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
)

// Stop kills the pause process and tears the pod's network down. It is idempotent and
// an unknown id succeeds. The work is detached from ctx (bounded by CleanupTimeout):
// a stop the kubelet gave up on still finishes.
func (m *Manager) Stop(ctx context.Context, id string) error {
	sb, err := m.store.get(id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	return m.stop(log.WithLogger(ctx, log.G(ctx).WithField("sandbox", sb.ID)), sb)
}

func (m *Manager) stop(ctx context.Context, sb *Sandbox) error {
	sb.opMu.Lock()
	defer sb.opMu.Unlock() // serialises Stop/Remove of one sandbox; no other lock held
	// From here on the pod is not ready: a container start racing this stop fails
	// with FailedPrecondition, and status reads do not wait for the teardown.
	sb.setState(pod.NotReady)
	stopped := sb.isStopped()
	// The pause task and the network go down concurrently: CNI DEL needs only the
	// pinned namespace, not the process in it.
	netc := make(chan error, 1)
	go func() {
		if !stopped && sb.NetNSPath == "" && sb.Pauseless {
			netc <- m.fs.removeNamespaces(sb) // the pinned IPC namespace
			return
		}
		if stopped || sb.NetNSPath == "" {
			netc <- nil
			return
		}
		if err := m.opts.Network.Teardown(ctx, attachment(sb)); err != nil {
			netc <- fmt.Errorf("tear down network of sandbox %s: %w", sb.ID, err)
			return
		}
		netc <- m.fs.removeNamespaces(sb)
	}()
	var taskErr error
	switch {
	case sb.Pauseless:
	case stopped:
		// Stopped before: the task was deleted then, which this call checks.
		if taskErr = ctrd.DeleteExitedTask(ctx, m.opts.Client.TaskService(), sb.ID); taskErr == nil {
			m.cgroups.remove(ctx, sb)
		}
	default:
		if taskErr = m.tasks.delete(ctx, sb.ID); taskErr == nil {
			m.cgroups.remove(ctx, sb)
		}
	}
	if err := errors.Join(taskErr, <-netc); err != nil {
		return err
	}
	if sb.Pauseless {
		// Only once the network is down: recovery takes a pod without it for stopped.
		if err := m.fs.unmarkRunning(sb.ID); err != nil {
			return err
		}
	}
	if stopped {
		return nil
	}
	if err := m.fs.unmountShm(sb.ID); err != nil {
		return err
	}
	sb.mu.Lock()
	sb.stopped = true
	sb.mu.Unlock()
	log.G(ctx).Info("sandbox stopped")
	return nil
}

// Remove stops the sandbox if needed and deletes everything it had. It is idempotent
// and an unknown id succeeds.
func (m *Manager) Remove(ctx context.Context, id string) error {
	sb, err := m.store.get(id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	return m.remove(log.WithLogger(ctx, log.G(ctx).WithField("sandbox", sb.ID)), sb)
}

// remove is Remove of sb, listed or not (a pod refused when announced).
func (m *Manager) remove(ctx context.Context, sb *Sandbox) error {
	if err := m.stop(ctx, sb); err != nil {
		return err
	}
	if err := m.deleteContainer(ctx, sb.ID); err != nil {
		return err
	}
	if !sb.Pauseless { // a pod without a pause task is not in containerd's sandbox store
		if err := m.records.removeFromStore(ctx, sb.ID); err != nil {
			return err
		}
	}
	if err := m.fs.removeFiles(sb.ID); err != nil {
		return err
	}
	if !sb.Pauseless {
		m.shims.reapPod(ctx, sb)
	}
	m.store.delete(sb)
	m.opts.Labels.Release(sb.ID, sb.ProcessLabel)
	log.G(ctx).Info("sandbox removed")
	return nil
}

func (m *Manager) deleteContainer(ctx context.Context, id string) error {
	// The task is gone (Stop deleted it): the snapshot (key: the pod's id) and the
	// record go without the client's checks, which read the record and the task
	// again. A snapshot not found under the handler's snapshotter (the config
	// changed since) is looked up the client's way, from the record.
	if sb, err := m.store.get(id); err == nil {
		removed := sb.Pauseless || sb.SharedRootfs // no snapshot
		if rt, err := m.opts.Handlers.Get(sb.RuntimeHandler); err == nil && !removed {
			err := m.opts.Client.SnapshotService(rt.Snapshotter).Remove(ctx, id)
			if err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("delete snapshot of pause container %s: %w", id, err)
			}
			removed = err == nil
		}
		if removed {
			if err := m.opts.Client.ContainerService().Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("delete pause container %s: %w", id, err)
			}
			return nil
		}
	}
	container, err := m.opts.Client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load pause container %s: %w", id, err)
	}
	err = container.Delete(ctx, client.WithSnapshotCleanup)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete pause container %s: %w", id, err)
	}
	return nil
}

// destroy removes every trace of a sandbox whose Run never finished (recovery).
func (m *Manager) destroy(ctx context.Context, sb *Sandbox) error {
	var errs []error
	if sb.Pauseless {
		// no task
	} else if err := m.tasks.delete(ctx, sb.ID); err != nil {
		errs = append(errs, err)
	} else {
		m.cgroups.remove(ctx, sb)
	}
	if sb.NetNSPath != "" {
		errs = append(errs, m.opts.Network.Teardown(ctx, attachment(sb)))
	}
	errs = append(errs, m.fs.removeNamespaces(sb))
	errs = append(errs, m.fs.removeFiles(sb.ID), m.deleteContainer(ctx, sb.ID), m.records.removeFromStore(ctx, sb.ID))
	return errors.Join(errs...)
}
