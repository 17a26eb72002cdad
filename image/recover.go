package image

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// Recovery of the image service. Assumptions:
//
//   - Work in flight that writes to containerd (a pull's content and extraction
//     snapshots, a container's writable layer before its record holds it, the
//     built-in pause image's import) is held by a containerd lease labelled
//     LeaseLabel, taken through WithLease.
//   - Recovery runs before shimd serves, so no such work of this process exists yet:
//     every labelled lease belongs to a process that died. Deleting it lets
//     containerd's garbage collector remove what it alone held (half-pulled
//     content, "extract-" snapshots), instead of waiting for it to expire.

// LeaseLabel marks the leases shimd takes for work in flight.
const LeaseLabel = "io.shimd.lease"

// leaseExpiry bounds a lease whose owner died while no shimd runs to recover it.
const leaseExpiry = 24 * time.Hour

// Leaser makes leases; *client.Client is one.
type Leaser interface {
	WithLease(ctx context.Context, opts ...leases.Opt) (context.Context, func(context.Context) error, error)
}

// WithLease puts a new lease labelled LeaseLabel=kind on ctx (unless ctx has one);
// done deletes it.
// A done that fails (containerd went away meanwhile) leaves the lease to
// DeleteAbandonedLeases, which shimd runs when containerd is back.
func WithLease(ctx context.Context, cl Leaser, kind string) (context.Context, func(context.Context) error, error) {
	_, had := leases.FromContext(ctx)
	lctx, done, err := cl.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(leaseExpiry),
		leases.WithLabels(map[string]string{LeaseLabel: kind}))
	if err != nil || had {
		return lctx, done, err
	}
	id, _ := leases.FromContext(lctx)
	return lctx, func(ctx context.Context) error {
		err := done(ctx)
		if err != nil && !errdefs.IsNotFound(err) {
			abandoned.Store(id, struct{}{})
		}
		return err
	}, nil
}

// abandoned are the IDs of leases of finished work whose deletion failed.
var abandoned sync.Map // lease ID -> struct{}

// DeleteAbandonedLeases deletes the leases whose done failed, so that containerd's
// garbage collector removes what only they held (a writable layer whose container
// was never recorded); those still failing stay for the next call.
func DeleteAbandonedLeases(ctx context.Context, ls leases.Manager) {
	abandoned.Range(func(key, _ any) bool {
		id := key.(string)
		err := ls.Delete(ctx, leases.Lease{ID: id})
		if err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).WithField("lease", id).Warn("delete abandoned lease")
			return true
		}
		abandoned.Delete(id)
		log.G(ctx).WithField("lease", id).Info("deleted the lease of work that ended while containerd was away")
		return true
	})
}

// Recover deletes the leases of work a previous shimd left unfinished.
func (s *Service) Recover(ctx context.Context) error {
	ls := s.opts.Client.LeasesService()
	stale, err := ls.List(ctx, fmt.Sprintf("labels.%q", LeaseLabel))
	if err != nil {
		return fmt.Errorf("list leases: %w", err)
	}
	for i, l := range stale {
		var opts []leases.DeleteOpt
		if i == len(stale)-1 {
			opts = append(opts, leases.SynchronousDelete) // collect what they held now
		}
		if err := ls.Delete(ctx, l, opts...); err != nil {
			return fmt.Errorf("delete lease %s: %w", l.ID, err)
		}
		log.G(ctx).WithField("lease", l.ID).WithField("kind", l.Labels[LeaseLabel]).Info("removed the lease of unfinished work")
	}
	return nil
}
