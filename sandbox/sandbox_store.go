package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/sandbox"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"

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
	client *client.Client
	// enabled: containerd has a sandbox store (2.x); pods are recorded there.
	enabled atomic.Bool
}

// detectSandboxStore tells from containerd's version whether it has a sandbox store.
func (r *storeRecords) detectSandboxStore(ctx context.Context) error {
	v, err := r.client.Version(ctx)
	if err != nil {
		return fmt.Errorf("containerd version: %w", err)
	}
	r.enabled.Store(!strings.HasPrefix(strings.TrimPrefix(v.Version, "v"), "1."))
	return nil
}

// recordInStore writes sb's record to the sandbox store; the undo removes it.
func (r *storeRecords) recordInStore(ctx context.Context, sb *Sandbox, rt pod.Handler) (func(context.Context) error, error) {
	if !r.enabled.Load() {
		return func(context.Context) error { return nil }, nil
	}
	opts, err := typeurl.MarshalAny(rt.Options)
	if err != nil {
		return nil, fmt.Errorf("runtime options: %w", err)
	}
	_, err = r.client.SandboxStore().Create(ctx, sandbox.Sandbox{
		ID:      sb.ID,
		Labels:  map[string]string{LabelKind: KindSandbox},
		Runtime: sandbox.RuntimeOpts{Name: rt.Type, Options: opts},
	})
	if err != nil {
		return nil, fmt.Errorf("record sandbox %s in containerd's sandbox store: %w", sb.ID, err)
	}
	sb.InStore = true
	return func(ctx context.Context) error { return r.removeFromStore(ctx, sb.ID) }, nil
}

// removeFromStore deletes the sandbox store record of id; a missing one is fine.
func (r *storeRecords) removeFromStore(ctx context.Context, id string) error {
	if !r.enabled.Load() {
		return nil
	}
	if err := r.client.SandboxStore().Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove sandbox %s from containerd's sandbox store: %w", id, err)
	}
	return nil
}

// recoverStore reads shimd's records in the sandbox store (recovery): those of known
// pods are marked on them, the others (a Run or Remove cut short) are deleted.
func (r *storeRecords) recoverStore(ctx context.Context, known map[string]*Sandbox) error {
	if err := r.detectSandboxStore(ctx); err != nil || !r.enabled.Load() {
		return err
	}
	list, err := r.client.SandboxStore().List(ctx, fmt.Sprintf("labels.%q==%s", LabelKind, KindSandbox))
	if err != nil {
		return fmt.Errorf("list containerd's sandbox store: %w", err)
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
