package container

import (
	"context"

	"github.com/containerd/containerd/v2/core/sandbox"
	"github.com/containerd/log"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/record"
)

// Exits kept across a restart of containerd. containerd 2.x, loading its shims when
// it starts, deletes a task that has no process left unless its id has a record in
// the sandbox store: it takes the task for one whose create a crash cut short
// (containerd#6860). With the task goes its exit status. The exit event of that
// delete, which the shim sends once containerd answers (and gives up on after about
// 15 s), is then all that tells it; a shimd that is down too misses it, and the
// container would read exit code 255.
//
// So each container has a record of its own in the sandbox store, under its id,
// from its CreateContainer until its removal. containerd keeps the stopped task, and
// shimd reads the exit from it (Recover, or the resync after containerd's restart).
// The record is metadata only: no sandbox controller acts on it, containers are not
// created in it (a pod's own record, under its pause container's id, is package
// sandbox's), and the label io.shimd.kind=container tells it from a pod's.

// exitKeeper writes and removes the containers' records in the sandbox store.
type exitKeeper struct {
	store *ctrd.SandboxStore
}

// keep writes the record of container id of pod sandboxID.
func (k *exitKeeper) keep(ctx context.Context, id, sandboxID string) error {
	return k.store.Create(ctx, "container", sandbox.Sandbox{
		ID:     id,
		Labels: map[string]string{record.LabelKind: record.KindContainer, record.LabelSandbox: sandboxID},
	})
}

// release deletes the record of container id; a missing one is fine.
func (k *exitKeeper) release(ctx context.Context, id string) error {
	return k.store.Delete(ctx, "container", id)
}

// recoverRecords deletes the records of containers shimd does not have (a create or
// a remove cut short); a container without a record gets one (made before shimd kept
// them).
func (k *exitKeeper) recoverRecords(ctx context.Context, known map[string]*Container) error {
	if err := k.store.Detect(ctx); err != nil {
		return err
	}
	list, err := k.store.List(ctx, record.KindContainer)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(list))
	for _, rec := range list {
		have[rec.ID] = true
		if _, ok := known[rec.ID]; ok {
			continue
		}
		log.G(ctx).WithField("container", rec.ID).Info("removing sandbox store record of a container that is gone")
		if err := k.release(ctx, rec.ID); err != nil {
			return err
		}
	}
	for id, c := range known { // keep writes nothing on containerd 1.x
		if !have[id] {
			if err := k.keep(ctx, id, c.SandboxID); err != nil {
				return err
			}
		}
	}
	return nil
}
