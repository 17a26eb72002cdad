package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sync/errgroup"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/record"
)

// Recover rebuilds the container store after a (re)start of shimd. Sandboxes must
// have been recovered first.
//
// Assumptions:
//   - every container is a containerd container in shimd's namespace labelled
//     io.shimd.kind=container with an io.shimd.container extension, written once by
//     CreateContainer; its status file (<root>/containers/<id>/status.json) is
//     written right after. A container without a status file never finished
//     CreateContainer and is deleted.
//   - a container whose sandbox is gone is an orphan of an interrupted
//     RemovePodSandbox and is deleted.
//   - a task that still runs is adopted: its FIFOs are reopened and output goes on
//     into the CRI log. A task that stopped while shimd was away is finished with its
//     exit status; a RUNNING container without a task exited unseen (code 255).
func (s *Manager) Recover(ctx context.Context) error {
	list, err := s.opts.Client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", record.LabelKind, record.KindContainer))
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var toAdopt []*Container
	for _, rec := range list {
		c, err := decodeContainerRecord(rec)
		if err != nil {
			log.G(ctx).WithError(err).WithField("container", rec.ID).Error("unreadable container record: left in place")
			continue
		}
		st, err := s.dirs.readStatus(c.ID)
		_, sbErr := s.opts.Pods.Pod(c.SandboxID)
		if err != nil || sbErr != nil {
			log.G(ctx).WithField("container", c.ID).Info("removing container whose creation or pod removal was interrupted")
			dctx, cancel := context.WithTimeout(ctx, cleanup.RecoveryAttempt)
			err := s.deleter.delete(dctx, c)
			cancel()
			if err != nil {
				log.G(ctx).WithError(err).Warn("remove orphaned container; will retry")
				s.deleter.later(c)
			}
			os.RemoveAll(s.dirs.containerDir(c.ID))
			continue
		}
		st.Starting = false
		c.status, c.statusDir = st, s.dirs.containerDir(c.ID) // not shared yet
		s.containers.add(c)
		switch st.State {
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			closeOnce(c)
		case runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_CREATED:
			toAdopt = append(toAdopt, c)
		}
	}
	known := map[string]*Container{}
	for _, c := range s.containers.list() {
		known[c.ID] = c
	}
	if err := s.keeper.recoverRecords(ctx, known); err != nil {
		return err
	}
	// containerd waits up to 2 s for each task's state from its shim: the tasks are
	// adopted side by side, so that busy shims cost that once, not per container.
	var g errgroup.Group
	g.SetLimit(cleanup.RecoveryReads)
	for _, c := range toAdopt {
		g.Go(func() error {
			if err := s.adopt(ctx, c); err != nil {
				log.G(ctx).WithError(err).WithField("container", c.ID).Warn("task's state unknown: adopted once containerd tells it")
				s.adoptLater(c)
			}
			return nil
		})
	}
	_ = g.Wait()
	s.dirs.removeOrphans(ctx, s.containers)
	s.layers.removeOrphans(ctx)
	s.volumes.sweep(ctx)
	return nil
}

// adopt reattaches to a container's task, or finishes it when it is gone; a task
// left paused by a checkpoint cut short is resumed. A CREATED
// container has a task only when shimd died inside StartContainer: a task that was
// created but not started is deleted (the container is CREATED again, and the
// kubelet's retry starts it); one that started makes the container RUNNING (or
// EXITED), and the retry succeeds.
//
// The error says containerd told nothing of the task (away, or the task's shim did
// not answer its state call in time): nothing was decided, and adopt may run again.
func (s *Manager) adopt(ctx context.Context, c *Container) error {
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	cc, task, err := ctrd.LoadTask(ctx, s.ctrd, c.ID)
	switch {
	case cc == nil && errdefs.IsNotFound(err):
		log.G(ctx).WithError(err).Warn("load task: the container's record is gone")
		return nil
	case errdefs.IsNotFound(err):
		if c.Status().State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			s.exits.finish(ctx, c, 255, time.Now())
		}
		return nil
	case err != nil:
		return fmt.Errorf("load task: %w", err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return fmt.Errorf("read task state: %w", err)
	}
	if st.Status == client.Unknown {
		return errors.New("containerd tells the task's state as unknown")
	}
	created := c.Status().State == runtimeapi.ContainerState_CONTAINER_CREATED
	switch {
	case created && st.Status == client.Created:
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warn("delete the task of an interrupted start")
		}
		os.RemoveAll(s.dirs.fifoDir(c.ID))
		log.G(ctx).Info("interrupted start undone: the container is CREATED")
		return nil
	case created:
		_ = c.Update(func(st *containerStatus) error {
			st.State, st.Pid, st.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, task.Pid(), time.Now().UnixNano()
			st.StartRecovered = true
			return nil
		})
		log.G(ctx).Info("interrupted start had started the task: the container is RUNNING")
	}
	if st.Status == client.Stopped {
		s.exits.finish(ctx, c, st.ExitStatus, st.ExitTime)
		return nil
	}
	if st.Status == client.Paused {
		// Only a checkpoint pauses a task (the CRI has no pause): shimd died in the
		// middle of one, before it could resume the task.
		if err := task.Resume(ctx); err != nil {
			log.G(ctx).WithError(err).Error("resume the task of a checkpoint cut short")
		} else {
			log.G(ctx).Info("checkpoint cut short by a restart: the task is resumed")
		}
	}
	os.RemoveAll(filepath.Join(s.dirs.containerDir(c.ID), checkpointWorkDirName))
	return reattachIO(ctx, cc, c)
}

// reattachIO gives c's running task its IO again: the FIFOs the shim still holds,
// copied to c's log.
func reattachIO(ctx context.Context, cc client.Container, c *Container) error {
	var logf *logFile
	if c.LogPath != "" {
		logf, _ = openLog(c.LogPath)
	}
	// containerd reads the task's state again first: it attaches nothing when it
	// cannot tell it.
	attached := false
	_, err := cc.Task(ctx, func(fifos *cio.FIFOSet) (cio.IO, error) {
		attached = true
		cio, err := attachIO(ctx, fifos, logf)
		if err != nil {
			return nil, err
		}
		c.setIO(cio)
		return cio.dio, nil
	})
	if (err != nil || !attached) && logf != nil {
		logf.Close()
	}
	switch {
	case err != nil && !attached && !errdefs.IsNotFound(err):
		return fmt.Errorf("reattach container IO: %w", err)
	case err != nil:
		log.G(ctx).WithError(err).Warn("reattach container IO")
	case !attached:
		return errors.New("reattach container IO: containerd tells the task's state as unknown")
	}
	return nil
}

// adoptLater runs adopt(c) again and again (Options.Cleanups) until containerd
// tells the state of c's task: recovery could not. A container removed, or whose
// exit was recorded, meanwhile is left as it is.
func (s *Manager) adoptLater(c *Container) {
	if s.opts.Cleanups == nil {
		return
	}
	s.opts.Cleanups.Add("adopt container "+c.ID, func(ctx context.Context) error {
		if cur, err := s.containers.get(c.ID); err != nil || cur != c || c.IO() != nil {
			return nil
		}
		switch c.Status().State {
		case runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_CREATED:
		default:
			return nil
		}
		if err := s.adopt(ctx, c); err != nil {
			return err
		}
		log.G(ctx).WithField("container", c.ID).Info("task's state read after recovery: container adopted")
		return nil
	})
}

// removeOrphans deletes status and FIFO directories of containers that are gone.
func (d dirs) removeOrphans(ctx context.Context, containers *containerStore) {
	for _, dir := range []string{filepath.Join(d.root, containerDirName), filepath.Join(d.state, containerFIFODirName)} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if _, err := containers.get(e.Name()); err == nil {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.G(ctx).WithError(err).Warn("remove orphaned container dir")
			}
		}
	}
}
