package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/record"
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
	sb.setState(StateNotReady)
	stopped := sb.isStopped()
	// The pause task and the network go down concurrently: CNI DEL needs only the
	// pinned namespace, not the process in it.
	netc := make(chan error, 1)
	go func() {
		if !stopped && sb.NetNSPath == "" && sb.Pauseless {
			netc <- m.removeNamespaces(sb) // the pinned IPC namespace
			return
		}
		if stopped || sb.NetNSPath == "" {
			netc <- nil
			return
		}
		if err := m.opts.Network.Teardown(ctx, m.attachment(sb)); err != nil {
			netc <- fmt.Errorf("tear down network of sandbox %s: %w", sb.ID, err)
			return
		}
		netc <- m.removeNamespaces(sb)
	}()
	var taskErr error
	if !sb.Pauseless {
		if taskErr = m.deleteTask(ctx, sb.ID); taskErr == nil {
			m.removeCgroup(ctx, sb)
		}
	}
	if err := errors.Join(taskErr, <-netc); err != nil {
		return err
	}
	if sb.Pauseless {
		// Only once the network is down: recovery takes a pod without it for stopped.
		if err := m.unmarkRunning(sb.ID); err != nil {
			return err
		}
	}
	if stopped {
		return nil
	}
	if err := m.unmountShm(sb.ID); err != nil {
		return err
	}
	sb.mu.Lock()
	sb.stopped = true
	sb.mu.Unlock()
	log.G(ctx).Info("sandbox stopped")
	return nil
}

// deleteTask kills and deletes the pause task; a missing task or container is fine.
func (m *Manager) deleteTask(ctx context.Context, id string) error {
	container, task, err := record.LoadTask(ctx, m.opts.Client, id)
	if container != nil && errdefs.IsNotFound(err) {
		return record.DeleteStaleTask(ctx, m.opts.Client.TaskService(), id)
	}
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pause task: %w", err)
	}
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		// A concurrent delete (or the shim's exit after it) can fail this one with
		// "ttrpc: closed": what counts is whether the task is gone.
		if _, terr := container.Task(ctx, nil); !errdefs.IsNotFound(terr) {
			return fmt.Errorf("delete pause task %s: %w", id, err)
		}
	}
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
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("sandbox", sb.ID))
	if err := m.stop(ctx, sb); err != nil {
		return err
	}
	if err := m.deleteContainer(ctx, sb.ID); err != nil {
		return err
	}
	if err := m.removeFromStore(ctx, sb.ID); err != nil {
		return err
	}
	if err := m.removeFiles(sb.ID); err != nil {
		return err
	}
	m.store.delete(sb)
	log.G(ctx).Info("sandbox removed")
	return nil
}

func (m *Manager) deleteContainer(ctx context.Context, id string) error {
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
	} else if err := m.deleteTask(ctx, sb.ID); err != nil {
		errs = append(errs, err)
	} else {
		m.removeCgroup(ctx, sb)
	}
	if sb.NetNSPath != "" {
		errs = append(errs, m.opts.Network.Teardown(ctx, m.attachment(sb)))
	}
	errs = append(errs, m.removeNamespaces(sb))
	errs = append(errs, m.removeFiles(sb.ID), m.deleteContainer(ctx, sb.ID), m.removeFromStore(ctx, sb.ID))
	return errors.Join(errs...)
}
