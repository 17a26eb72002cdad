package sandbox

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/sandbox"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/pod"
)

// containerd's sandbox store (containerd 2.x). A pod recorded there, under the id of
// its pause container, has its containers' tasks loaded into the pod's running shim
// (containerd's ShimManager.Start finds the shim of the sandbox's task) instead of
// containerd exec'ing "containerd-shim-runc-v2 start" for each container to find it.
// This needs no sandbox controller and no CRI plugin: only the record.
//
// Containerd 1.6 has no sandbox store: there, and for pods created before shimd used
// it, containers take the old path (the shim groups them by the
// io.kubernetes.cri.sandbox-id annotation).

// storeRecords writes and removes pods' records in the sandbox store.
type storeRecords struct {
	store *ctrd.SandboxStore
}

// recordInStore writes sb's record to the sandbox store; the undo removes it.
func (r *storeRecords) recordInStore(ctx context.Context, sb *Sandbox, rt pod.Handler) (func(context.Context) error, error) {
	if !r.store.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	opts, err := typeurl.MarshalAny(rt.Options)
	if err != nil {
		return nil, fmt.Errorf("runtime options: %w", err)
	}
	if err := r.store.Create(ctx, "sandbox", sandbox.Sandbox{
		ID:      sb.ID,
		Labels:  map[string]string{LabelKind: KindSandbox},
		Runtime: sandbox.RuntimeOpts{Name: rt.Type, Options: opts},
	}); err != nil {
		return nil, err
	}
	sb.InStore = true
	return func(ctx context.Context) error { return r.removeFromStore(ctx, sb.ID) }, nil
}

// removeFromStore deletes the sandbox store record of id; a missing one is fine.
func (r *storeRecords) removeFromStore(ctx context.Context, id string) error {
	return r.store.Delete(ctx, "sandbox", id)
}

// recoverStore reads shimd's records in the sandbox store (recovery): those of known
// pods are marked on them, the others (a Run or Remove cut short) are deleted.
func (r *storeRecords) recoverStore(ctx context.Context, known map[string]*Sandbox) error {
	if err := r.store.Detect(ctx); err != nil {
		return err
	}
	list, err := r.store.List(ctx, KindSandbox)
	if err != nil {
		return err
	}
	for _, rec := range list {
		if sb, ok := known[rec.ID]; ok {
			sb.InStore = true
			continue
		}
		log.G(ctx).WithField("sandbox", rec.ID).Info("removing sandbox store record of a pod that is gone")
		if err := r.removeFromStore(ctx, rec.ID); err != nil {
			return err
		}
	}
	return nil
}
