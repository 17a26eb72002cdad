package container

import (
	"context"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
)

// How long an exited container's output may take to drain before its FIFOs are
// closed anyway (a child holding them open must not keep the container RUNNING).
const ioDrainTimeout = 2 * time.Second

// Exits turns the task exits and OOM kills the event monitor sees into container
// statuses, and re-reads every container's task after a reconnection.
type Exits struct{ m *Manager }

// TaskExit is told of every task exit in shimd's namespace by the event monitor
// (package taskevents), after the sandboxes are.
func (x *Exits) TaskExit(containerID, execID string, status uint32, at time.Time) {
	if containerID != execID {
		return // an exec process; its caller waits for it
	}
	if sb, err := x.m.opts.Pods.Pod(containerID); err == nil && sb.ID == containerID {
		x.m.events.Emit(sb.ID, sb.ID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT) // its pause process
		return
	}
	c, err := x.m.containers.get(containerID)
	if err != nil || c.ID != containerID {
		return
	}
	x.m.finishing.Go(func() { x.finish(context.Background(), c, status, at) })
}

// TaskOOM remembers an OOM kill, reported as the reason when the container exits.
func (x *Exits) TaskOOM(containerID string) {
	if c, err := x.m.containers.get(containerID); err == nil && c.ID == containerID {
		c.markOOM()
	}
}

// finish records a container's exit: waits for its output to drain, deletes the task
// (so the shim can go), and persists EXITED with code, reason and time. Idempotent.
func (x *Exits) finish(ctx context.Context, c *Container, status uint32, at time.Time) {
	exited, cio, oom := c.exitInputs()
	if exited {
		return
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	if cio != nil {
		select {
		case <-cio.done:
		case <-time.After(ioDrainTimeout):
		}
		cio.close()
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ctrd.DeleteExitedTask(dctx, x.m.ctrd.TaskService(), c.ID); err != nil {
		log.G(ctx).WithError(err).Warn("delete exited task")
	}
	reason := "Completed"
	switch {
	case oom:
		reason = "OOMKilled"
	case status != 0:
		reason = "Error"
	}
	if at.IsZero() || at.Unix() <= 0 {
		at = time.Now()
	}
	err := c.Update(func(st *containerStatus) error {
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return nil
		}
		st.State, st.ExitCode, st.Reason, st.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, int32(status), reason, at.UnixNano()
		st.Starting = false
		if st.StartedAt == 0 || st.StartedAt > st.FinishedAt {
			st.StartedAt = st.FinishedAt
		}
		return nil
	})
	if err != nil {
		log.G(ctx).WithError(err).Warn("persist exit status")
	}
	c.setIO(nil)
	closeOnce(c)
	log.G(ctx).WithField("exit_code", status).WithField("reason", reason).Info("container exited")
	x.m.events.Emit(c.ID, c.SandboxID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	x.m.nri.containerEvent(dctx, api.Event_STOP_CONTAINER, c)
}

// Resync finishes every RUNNING container whose task is gone or stopped: its exit
// was not published while shimd was away from containerd's events. The event monitor
// runs it after every (re)subscription.
func (x *Exits) Resync(ctx context.Context) {
	for _, c := range x.m.containers.list() {
		if c.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		code, at, running, err := x.taskState(ctx, c.ID)
		if err != nil || running {
			continue
		}
		x.finish(ctx, c, code, at)
	}
}

// taskState reads a container's task: exit code and time when stopped.
func (x *Exits) taskState(ctx context.Context, id string) (code uint32, at time.Time, running bool, err error) {
	cc, task, err := ctrd.LoadTask(ctx, x.m.ctrd, id)
	if cc != nil && errdefs.IsNotFound(err) {
		return 255, time.Now(), false, nil // the container has no task
	}
	if err != nil {
		return 0, time.Time{}, false, err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	if st.Status == client.Stopped {
		return st.ExitStatus, st.ExitTime, false, nil
	}
	return 0, time.Time{}, true, nil
}

// signal sends sig to the container's task.
func (x *Exits) signal(ctx context.Context, c *Container, sig syscall.Signal) error {
	_, err := x.m.ctrd.TaskService().Kill(ctx, &tasks.KillRequest{ContainerID: c.ID, Signal: uint32(sig)})
	return errgrpc.ToNative(err)
}
