package image

import (
	"context"
	"testing"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
)

// fakeLeaser hands out leases whose done fails with doneErr.
type fakeLeaser struct{ doneErr error }

func (f fakeLeaser) WithLease(ctx context.Context, opts ...leases.Opt) (context.Context, func(context.Context) error, error) {
	var l leases.Lease
	for _, o := range opts {
		if err := o(&l); err != nil {
			return nil, nil, err
		}
	}
	return leases.WithLease(ctx, l.ID), func(context.Context) error { return f.doneErr }, nil
}

type fakeLeases struct {
	leases.Manager
	deleteErr error
	deleted   []string
}

func (f *fakeLeases) Delete(_ context.Context, l leases.Lease, _ ...leases.DeleteOpt) error {
	if f.deleteErr != nil {
		return f.deleteErr
	}
	f.deleted = append(f.deleted, l.ID)
	return nil
}

func TestLeaseWhoseDeleteFailedIsDeletedLater(t *testing.T) {
	t.Cleanup(abandoned.Clear)
	ctx := context.Background()

	// Deleted at once: nothing to do later.
	_, done, err := WithLease(ctx, fakeLeaser{}, "container")
	require.NoError(t, err)
	require.NoError(t, done(ctx))
	require.Empty(t, abandonedIDs())

	// containerd went away before done: the lease is remembered...
	lctx, done, err := WithLease(ctx, fakeLeaser{doneErr: errdefs.ErrUnavailable}, "container")
	require.NoError(t, err)
	id, ok := leases.FromContext(lctx)
	require.True(t, ok)
	require.Error(t, done(ctx))
	require.Equal(t, []string{id}, abandonedIDs())

	// ...kept while containerd still fails...
	ls := &fakeLeases{deleteErr: errdefs.ErrUnavailable}
	DeleteAbandonedLeases(ctx, ls)
	require.Equal(t, []string{id}, abandonedIDs())

	// ...and deleted once it answers.
	ls.deleteErr = nil
	DeleteAbandonedLeases(ctx, ls)
	require.Equal(t, []string{id}, ls.deleted)
	require.Empty(t, abandonedIDs())

	// A lease already gone is not remembered.
	_, done, err = WithLease(ctx, fakeLeaser{doneErr: errdefs.ErrNotFound}, "container")
	require.NoError(t, err)
	require.Error(t, done(ctx))
	require.Empty(t, abandonedIDs())
}

func abandonedIDs() []string {
	var ids []string
	abandoned.Range(func(key, _ any) bool { ids = append(ids, key.(string)); return true })
	return ids
}
