package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/spec"
)

// A CreateContainer that fails after it made something undoes all of it, whatever
// step failed: the writable layer, the containerd container, the lease, the status
// and FIFO directories and the name are gone, and a retry with the same name, once
// the fault is gone, succeeds. Each case runs for an image's first container (the
// writable layer first, under a lease, to read the image's users) and for a later
// one (the record first, then the layer).
func TestCreateContainerUndo(t *testing.T) {
	tests := []struct {
		name    string
		inject  func(ts *testService) (heal func())
		class   func(error) bool
		wantErr string
		// laterOnly: a step only a later container of the image has.
		laterOnly bool
	}{
		{
			name: "writable layer cannot be prepared after the record was made",
			inject: func(ts *testService) func() {
				ts.ctrd.committed[testLayer] = false // the image's layers are gone; no image store to unpack from
				return func() { ts.ctrd.committed[testLayer] = true }
			},
			class: errdefs.IsNotImplemented, wantErr: "fake: no image store", laterOnly: true,
		},
		{
			name: "spec fails after the writable layer was prepared",
			inject: func(ts *testService) func() {
				ts.sb.PID = 0 // the pod's pause process is gone
				return func() { ts.sb.PID = 1 }
			},
			class: errdefs.IsFailedPrecondition, wantErr: "no running pause process",
		},
		{
			name: "containerd container cannot be made",
			inject: func(ts *testService) func() {
				ts.ctrd.newContainerErr = fmt.Errorf("fake: %w", errdefs.ErrUnavailable)
				return func() { ts.ctrd.newContainerErr = nil }
			},
			class: errdefs.IsUnavailable, wantErr: "create containerd container",
		},
		{
			name: "status cannot be written after the containerd container was made",
			inject: func(ts *testService) func() {
				// <root>/containers is a file: no status directory can be made in it.
				blocker := filepath.Join(ts.opts.RootDir, containerDirName)
				require.NoError(t, os.MkdirAll(ts.opts.RootDir, 0o700))
				require.NoError(t, os.WriteFile(blocker, nil, 0o600))
				return func() { require.NoError(t, os.Remove(blocker)) }
			},
			class: func(error) bool { return true }, wantErr: "write container status",
		},
	}
	for _, later := range []bool{false, true} {
		for _, tt := range tests {
			if tt.laterOnly && !later {
				continue
			}
			name := "first container of the image: " + tt.name
			if later {
				name = "later container of the image: " + tt.name
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				ts := newTestService(t)
				if later {
					ts.userDBs.put(testLayer, &spec.UserDB{}) // as a first container leaves it
				}
				heal := tt.inject(ts)
				req := &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config}

				_, err := ts.Create(ctx, req)
				require.Error(t, err)
				require.ErrorContains(t, err, tt.wantErr)
				require.True(t, tt.class(err), "error class of %v", err)

				require.Empty(t, ts.ctrd.state(), "what the failed create left in containerd")
				require.Empty(t, ts.containers.list(), "containers in the store")
				require.Empty(t, dirEntries(t, filepath.Join(ts.opts.RootDir, containerDirName)), "status dirs")
				require.Empty(t, dirEntries(t, filepath.Join(ts.opts.StateDir, containerFIFODirName)), "FIFO dirs")

				// The name was released: the retry makes the container.
				heal()
				resp, err := ts.Create(ctx, req)
				require.NoError(t, err)
				require.ElementsMatch(t, []string{"snapshot " + resp.ContainerId, "container " + resp.ContainerId}, ts.ctrd.state())
				c, err := ts.containers.get(resp.ContainerId)
				require.NoError(t, err)
				require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, c.Status().State)
			})
		}
	}
}

// dirEntries names what dir holds (nothing when it does not exist).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) || (err != nil && !isDir(dir)) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// A CreateContainer whose undo fails (containerd does not answer the delete of the
// record it just wrote) leaves the record to the cleanup queue, which deletes it
// on a retry: nothing is left, without a restart and without a sweep.
func TestCreateUndoFailureRetried(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	q := cleanup.New()
	q.First = 10 * time.Millisecond
	ts.useCleanups(q)
	// The first container reads the image's users; the second's writable layer is
	// then prepared after its record is written.
	_, err := ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("first"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	before := ts.ctrd.state()
	ts.ctrd.prepareErr = fmt.Errorf("fake: prepare: %w", errdefs.ErrUnavailable)
	ts.ctrd.failDeletes = 2 // the undo's delete and the first retry fail
	_, err = ts.Create(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("second"), SandboxConfig: ts.sb.Config})
	require.ErrorContains(t, err, "fake: prepare")
	pending := q.Pending()
	require.Len(t, pending, 1)
	require.True(t, strings.HasPrefix(pending[0], "container "), pending)
	require.Greater(t, len(ts.ctrd.state()), len(before), "the record is left by the failed undo")

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go q.Run(rctx)
	require.Eventually(t, func() bool { return len(q.Pending()) == 0 }, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, before, ts.ctrd.state(), "the retry deleted the record")
	require.Equal(t, 1, q.Retried())
	require.Zero(t, ts.ctrd.failDeletes)
}
