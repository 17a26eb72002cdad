package container

import (
	"context"
	"sync"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
)

// Exits while containerd is away. The exit of a container is known only to its
// shim, which forwards it to containerd; while containerd is down the shim queues the
// event and tries again. A pod with a pause keeps its shim running, so the event
// arrives once containerd is back. A pause-less pod whose last running container
// exits meanwhile has a shim with no process left: containerd 2.x, when it starts,
// would take the task for a leaked shim's, delete it and shut the shim down, and the
// queued exit would die with the shim, but it keeps the task of a container recorded
// in its sandbox store (exit_keep.go). So that the exit shows while containerd is
// down, and for a container made before shimd kept records, while containerd's
// events do not flow shimd asks each pause-less pod's shim itself:
// one ttrpc connection per shim, a Wait per running container, which answers when
// the container exits (at once if it has). Once the events flow again the waits go
// on for lostExitWait, the time a Resync waits for a lost exit, then stop.

// Live is told by the event monitor whether containerd's events flow.
func (x *Exits) Live(live bool) {
	x.directMu.Lock()
	defer x.directMu.Unlock()
	if live {
		if stop := x.stopDirect; stop != nil {
			x.stopDirect = nil
			time.AfterFunc(lostExitWait, stop)
		}
		return
	}
	if x.stopDirect != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	x.stopDirect = cancel
	x.m.finishing.Go(func() {
		go func() { // shimd's shutdown ends the waits too (Close waits for them)
			select {
			case <-x.m.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		x.waitShims(ctx)
	})
}

// waitShims waits, until ctx ends, for the exits of the running containers of every
// pause-less pod through the pods' shims.
func (x *Exits) waitShims(ctx context.Context) {
	byPod := map[string][]*Container{}
	for _, c := range x.m.containers.list() {
		if c.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if p, err := x.m.opts.Pods.Pod(c.SandboxID); err == nil && p.Pauseless {
			byPod[p.ID] = append(byPod[p.ID], c)
		}
	}
	var wg sync.WaitGroup
	for id, cs := range byPod {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := x.waitShim(ctx, id, cs); err != nil && ctx.Err() == nil {
				log.G(ctx).WithError(err).WithField("sandbox", id).Warn("exits while containerd is away: cannot ask the pod's shim")
			}
		}()
	}
	wg.Wait()
}

// waitShim asks a pause-less pod's shim for the exits of its containers cs.
func (x *Exits) waitShim(ctx context.Context, podID string, cs []*Container) error {
	sock, err := x.m.opts.Pods.PodShimSocket(podID)
	if err != nil {
		return err
	}
	tc, err := ctrd.DialShim(ctx, sock)
	if err != nil {
		return err
	}
	defer tc.Close()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, at, err := shimWait(ctx, tc, c.ID)
			if err != nil {
				if ctx.Err() == nil {
					log.G(ctx).WithError(err).WithField("container", c.ID).Debug("exits while containerd is away: wait")
				}
				return
			}
			log.G(ctx).WithField("container", c.ID).WithField("exit_code", code).Info("exit told by the pod's shim while containerd is away")
			x.finish(context.Background(), c, code, at)
		}()
	}
	wg.Wait()
	return nil
}

// shimWait waits for task id's exit on a shim: task API v3 (containerd 2.x shims),
// else v2 (1.6).
func shimWait(ctx context.Context, tc *ttrpc.Client, id string) (uint32, time.Time, error) {
	r3, err := taskv3.NewTTRPCTaskClient(tc).Wait(ctx, &taskv3.WaitRequest{ID: id})
	if err == nil {
		return r3.ExitStatus, r3.ExitedAt.AsTime(), nil
	}
	if !ctrd.ShimLacksV3(err) {
		return 0, time.Time{}, err
	}
	r2, err := taskv2.NewTTRPCTaskClient(tc).Wait(ctx, &taskv2.WaitRequest{ID: id})
	if err != nil {
		return 0, time.Time{}, err
	}
	return r2.ExitStatus, r2.ExitedAt.AsTime(), nil
}
