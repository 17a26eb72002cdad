//go:build integration

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// A containerd container that shimd does not know (a record without its status,
// what a crash in the middle of CreateContainer leaves) is not touched while shimd
// serves: shimd removes only what its own calls decided to remove, retrying a
// failed removal (package cleanup), and decides nothing from containerd's listing.
// The next restart's recovery removes it with its writable layer; the containers
// shimd knows are left alone.
func TestUnknownContainerRemovedAtRestart(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "unknown")
	known := pod.run(pod.container("main", "sleep", "1000"))

	// The unknown one: a copy of the known container's record under a new id, with
	// a writable layer of its own, as a CreateContainer makes them.
	cl := env.Containerd.Client(t)
	ctx, done, err := cl.WithLease(ctxT(t, time.Minute))
	require.NoError(t, err)
	rec, err := cl.ContainerService().Get(ctx, known)
	require.NoError(t, err)
	sn := cl.SnapshotService(rec.Snapshotter)
	info, err := sn.Stat(ctx, rec.SnapshotKey)
	require.NoError(t, err)
	orphan := strings.Repeat("5e", 32)
	_, err = sn.Prepare(ctx, orphan, info.Parent)
	require.NoError(t, err)
	rec.ID, rec.SnapshotKey = orphan, orphan
	_, err = cl.ContainerService().Create(ctx, rec)
	require.NoError(t, err)
	require.NoError(t, done(ctx))

	// Containers created meanwhile, and 5 s of serving: nothing removes the
	// unknown record.
	var created []string
	for i := 0; i < 5; i++ {
		created = append(created, pod.create(pod.container("late"+string(rune('a'+i)), "sleep", "1000")))
	}
	time.Sleep(5 * time.Second)
	_, err = cl.ContainerService().Get(ctxT(t, 10*time.Second), orphan)
	require.NoError(t, err, "while shimd serves, the unknown record stays")

	rs = restartShimd(t, env)
	_, err = cl.ContainerService().Get(ctxT(t, 10*time.Second), orphan)
	require.True(t, errdefs.IsNotFound(err), "recovery removes the unknown record: %v", err)
	_, err = sn.Stat(ctxT(t, 10*time.Second), orphan)
	require.True(t, errdefs.IsNotFound(err), "its writable layer is removed with it: %v", err)
	log, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(log), "removing container whose creation or pod removal was interrupted")

	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, known).State)
	for _, id := range created {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, containerStatus(t, rs, id).State)
		_, err := cl.ContainerService().Get(ctxT(t, 10*time.Second), id)
		require.NoError(t, err, "a container shimd created is still in containerd")
	}
	stopRemove(t, rs, pod.id)
	env.CheckNoLeaks(t)
}
