package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
)

// StartContainer starts a CREATED container: a task whose stdio goes to the CRI log.
// Its exit is seen by the event monitor (TaskExit).
func (s *Manager) Start(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.containers.get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if started, err := c.beginStart(); started || err != nil {
		return &runtimeapi.StartContainerResponse{}, err
	}
	defer c.endStart()
	sb, err := s.opts.Pods.Pod(c.SandboxID)
	if err == nil && sb.State != pod.Ready {
		err = fmt.Errorf("sandbox %s is not ready: %w", c.SandboxID, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		c.setStarting(false)
		return nil, err
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	cctx, cancel := s.detachedContext(ctx)
	defer cancel()
	st := newSteps()
	err = s.nri.start(cctx, c)
	st.done("nri")
	if err == nil {
		err = s.startTask(cctx, c, st)
	}
	if err != nil {
		if !podReady(s.opts.Pods, c.SandboxID) {
			// The pod was stopped meanwhile (its namespaces are gone): not a runtime fault.
			err = fmt.Errorf("sandbox %s stopped while container %s started: %v: %w", c.SandboxID, c.ID, err, errdefs.ErrFailedPrecondition)
		} else if _, ok := execStartExitCode(err); ok {
			// The image has no such command, or it cannot be executed.
			err = fmt.Errorf("container %s: its command cannot be run: %s: %w", c.ID, execStartMessage(err), errdefs.ErrFailedPrecondition)
		}
		// As the kubelet expects: the container is EXITED with the reason, not CREATED.
		_ = c.Update(func(st *containerStatus) error {
			st.Starting = false
			st.State = runtimeapi.ContainerState_CONTAINER_EXITED
			st.ExitCode, st.Reason, st.Message = 128, "StartError", err.Error()
			st.FinishedAt = time.Now().UnixNano()
			return nil
		})
		closeOnce(c)
		s.events.Emit(c.ID, c.SandboxID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		return nil, err
	}
	log.G(ctx).WithField("steps", st).Info("container started")
	s.events.Emit(c.ID, c.SandboxID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	s.nri.containerEvent(cctx, api.Event_POST_START_CONTAINER, c)
	return &runtimeapi.StartContainerResponse{}, nil
}

func (s *Manager) startTask(ctx context.Context, c *Container, st *steps) (retErr error) {
	rootfs, kept := c.takeRootfs()
	if !kept {
		var err error
		if rootfs, err = s.layers.rootfsMounts(ctx, c); err != nil {
			return fmt.Errorf("mounts of the writable layer: %w", err)
		}
	}
	if err := os.MkdirAll(s.dirs.fifoDir(c.ID), 0o700); err != nil {
		return err
	}
	taskOpts, restoreDir, err := s.ckpt.restoreOptions(ctx, c)
	if err != nil {
		return err
	}
	st.done("load+log")
	cio, initPid, err := s.createTask(ctx, c, rootfs, taskOpts)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			if err := s.gates.deleting(c.SandboxID, func() error { return ctrd.KillDeleteTask(ctx, s.ctrd.TaskService(), c.ID) }); err != nil {
				log.G(ctx).WithError(err).Warn("undo task")
			}
			cio.close()
		}
	}()
	c.setIO(cio)
	if sb, err := s.opts.Pods.Pod(c.SandboxID); err == nil {
		c.setPodOOMBase(readPodOOMBase(initPid, sb.Config.GetLinux().GetCgroupParent()))
	}
	st.done("task-create")
	startedAt := time.Now()
	pid, err := ctrd.StartTask(ctx, s.ctrd.TaskService(), c.ID)
	if err != nil {
		if restoreDir != "" {
			return restoreError(err, criuLogTail(filepath.Join(restoreDir, "restore.log")))
		}
		return fmt.Errorf("start task: %w", err)
	}
	st.done("task-start")
	if restoreDir != "" {
		// Restored: CRIU's images are no longer needed.
		if err := os.RemoveAll(restoreDir); err != nil {
			log.G(ctx).WithError(err).Warn("remove the restored checkpoint")
		}
		st.done("restored")
	}
	defer st.done("status")
	return c.Update(func(cs *containerStatus) error {
		cs.Starting = false
		cs.Pid = pid
		// An exit told during the start is recorded only after it (Exits.finish),
		// so this is CREATED; checked all the same, an exit must never be undone.
		if cs.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			cs.State = runtimeapi.ContainerState_CONTAINER_RUNNING
			cs.StartedAt = startedAt.UnixNano()
		}
		return nil
	})
}

// createTask creates c's task in its pod's shim, its stdio to c's log, and returns
// the task's IO and its init's pid. The log is opened for each try of the pod's gate:
// a failed create closes it with its IO.
func (s *Manager) createTask(ctx context.Context, c *Container, rootfs []mount.Mount, taskOpts *anypb.Any) (*containerIO, uint32, error) {
	var cio *containerIO
	var initPid uint32
	err := s.gates.creating(ctx, c.SandboxID, func() error {
		var logf *logFile
		if c.LogPath != "" {
			var err error
			if logf, err = openLog(c.LogPath); err != nil {
				return err
			}
		}
		cio = nil
		var err error
		_, initPid, err = ctrd.NewTaskWithOptions(ctx, s.ctrd.TaskService(), c.ID, rootfs, newIOCreator(ctx, s.dirs.fifoDir(c.ID), c, logf, &cio), taskOpts)
		if err != nil {
			if cio != nil {
				cio.close()
			} else if logf != nil {
				logf.Close()
			}
			return fmt.Errorf("create task: %w", err)
		}
		return nil
	})
	return cio, initPid, err
}

// closeOnce closes c.exited unless it is closed.
func closeOnce(c *Container) {
	c.exitedOnce.Do(func() { close(c.exited) })
}

// podReady reads now whether a pod is READY (the facts of a pod are a snapshot).
func podReady(pods Pods, id string) bool {
	p, err := pods.Pod(id)
	return err == nil && p.State == pod.Ready
}
