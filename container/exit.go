package container

import (
	"context"
	"sync"
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

// lostExitWait is how long Resync waits for the exit status of a RUNNING container
// whose task containerd no longer has before it records the exit as unknown (255).
// containerd 2.x deletes a task it finds stopped when it starts again (it takes the
// task's shim for a leaked one: no process left), without a TaskExit, unless the
// container has its record in the sandbox store (exit_keep.go; one made before shimd
// kept them has none). 1.6 keeps such a task. The status then comes only from the
// shim, once containerd answers: the TaskDelete of that delete, and the TaskExit it
// could not forward while containerd was down. The shim tries a forward again 1, 2,
// 3, 4 and 5 s apart, then drops it.
var lostExitWait = 16 * time.Second

// Exits turns the task exits and OOM kills the event monitor sees into container
// statuses, and re-reads every container's task after a reconnection.
type Exits struct {
	m *Manager
	// awaiting holds the ids of the containers whose lost exit a Resync waits for.
	awaiting sync.Map
	// stopDirect ends the waits on pause-less pods' shims (exit_direct.go); nil when
	// none run.
	directMu   sync.Mutex
	stopDirect context.CancelFunc
}

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

// TaskDelete is told of every task delete in shimd's namespace by the event monitor.
// The delete of a task by containerd itself reports the exit of a container whose
// TaskExit was lost (see lostExitWait). Only the delete of the task the container
// runs counts, by its pid: not a stale task's that shimd replaced.
func (x *Exits) TaskDelete(containerID string, pid, status uint32, at time.Time) {
	c, err := x.m.containers.get(containerID)
	if err != nil || c.ID != containerID || pid == 0 || c.Status().Pid != pid {
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
// (so the shim can go), and persists EXITED with code, reason and time. Idempotent:
// while one call records the exit, another waits for it (or for ctx).
func (x *Exits) finish(ctx context.Context, c *Container, status uint32, at time.Time) {
	exited, cio := c.exitInputs()
	if exited {
		return
	}
	if !c.finishing.CompareAndSwap(false, true) {
		select {
		case <-c.exited:
		case <-ctx.Done():
		}
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
	// A command that ends at once can exit before its StartContainer returns:
	// containerd's task Start asks the shim for the task's state after starting
	// it, and fails if the task was deleted meanwhile. So the task is deleted,
	// and the exit recorded, after the start has returned.
	if started := c.startRunning(); started != nil {
		log.G(ctx).Debug("exit told while the start runs: recorded after it")
		select {
		case <-started:
		case <-ctx.Done():
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := x.m.gates.deleting(c.SandboxID, func() error { return ctrd.DeleteExitedTask(dctx, x.m.ctrd.TaskService(), c.ID) }); err != nil {
		log.G(ctx).WithError(err).Warn("delete exited task")
	} else {
		c.taskDeleted.Store(true)
	}
	reason := "Completed"
	switch {
	case oomKilled(c, status):
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

// Resync finishes every RUNNING container whose task stopped: its exit was not
// published while shimd was away from containerd's events. For one whose task is
// gone it waits (lostExitWait) for the exit events that may still come. The event
// monitor runs it after every (re)subscription.
func (x *Exits) Resync(ctx context.Context) {
	for _, c := range x.m.containers.list() {
		if c.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		ts, err := x.taskState(ctx, c.ID)
		switch {
		case err != nil || ts.running:
		case ts.gone:
			if _, waiting := x.awaiting.LoadOrStore(c.ID, true); !waiting {
				x.m.finishing.Go(func() {
					defer x.awaiting.Delete(c.ID)
					x.awaitLostExit(c, ts.at)
				})
			}
		default:
			x.finish(ctx, c, ts.code, ts.at)
		}
	}
}

// awaitLostExit waits up to lostExitWait for an event to tell the exit of c, whose
// task is gone, then records exit code 255 at time at. At shutdown it records
// nothing: the next shimd's recovery does.
func (x *Exits) awaitLostExit(c *Container, at time.Time) {
	timer := time.NewTimer(lostExitWait)
	defer timer.Stop()
	select {
	case <-c.exited:
		return
	case <-x.m.closing:
		return
	case <-timer.C:
	}
	log.L.WithField("container", c.ID).Warn("the exit status of a container whose task containerd deleted never came: recorded as 255")
	x.finish(context.Background(), c, 255, at)
}

// taskExit is what containerd says of a container's task.
type taskExit struct {
	running bool
	gone    bool // the container has no task
	// code and at are the exit status and time of a stopped task (255 and now when gone).
	code uint32
	at   time.Time
}

// taskState reads a container's task.
func (x *Exits) taskState(ctx context.Context, id string) (taskExit, error) {
	cc, task, err := ctrd.LoadTask(ctx, x.m.ctrd, id)
	if cc != nil && errdefs.IsNotFound(err) {
		return taskExit{gone: true, code: 255, at: time.Now()}, nil
	}
	if err != nil {
		return taskExit{}, err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return taskExit{}, err
	}
	if st.Status == client.Stopped {
		return taskExit{code: st.ExitStatus, at: st.ExitTime}, nil
	}
	return taskExit{running: true}, nil
}

// signal sends sig to the container's task.
func (x *Exits) signal(ctx context.Context, c *Container, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		c.markKilledByShimd()
	}
	_, err := x.m.ctrd.TaskService().Kill(ctx, &tasks.KillRequest{ContainerID: c.ID, Signal: uint32(sig)})
	return errgrpc.ToNative(err)
}
