//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
)

// A shim that still holds a task whose bundle containerd deleted. The runc shim of
// containerd 2.4 adds a task to its table when runc create returns, not when the
// create began: when containerd gives up on a create (its caller, shimd, was
// killed) it asks the shim to delete the task, gets NotFound, and the create then
// finishes; containerd drops the shim and deletes the bundle. Such a shim refuses to
// shut down while it has the task, and can never delete it, because runc writes its
// log into the bundle (the 200-round crash soak met one, 2026-12-01). shimd's sweep
// must stop it all the same, and the task's process and state must go with it.
//
// The state is made here the way containerd leaves it: a created task, containerd
// killed, its bundle deleted (once after containerd's cleanup of a dead shim has
// deleted the task in runc, once with the task's process still waiting in runc
// init), containerd started again, the container's record deleted; then shimd
// restarts and sweeps.
func TestShimWithLostBundleIsStopped(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	ns := env.Containerd.Namespace()
	var ids []string
	for i, runcDeleted := range []bool{true, false} {
		id := fmt.Sprintf("%064x", 0xb0+i)
		ids = append(ids, id)
		createdTask(t, env, id, nil)
		require.Len(t, shimsOf(t, env, id), 1)

		loseTask(t, env, id, runcDeleted)
		require.Len(t, shimsOf(t, env, id), 1, "the shim outlives containerd's record of its task")
	}

	env.Shimd.Kill9()
	env.Shimd.Start(t)
	waitReady(t, env.Shimd.Runtime(t))
	for _, id := range ids {
		require.Eventually(t, func() bool { return len(shimsOf(t, env, id)) == 0 }, 30*time.Second, 100*time.Millisecond,
			"the shim of task %s, whose bundle containerd deleted", id)
		_, err := os.Stat(filepath.Join(env.Containerd.State(), "io.containerd.runtime.v2.task", ns, id))
		require.ErrorIs(t, err, os.ErrNotExist, "the bundle made again for the delete is removed")
	}
	// The harness's leak check follows: no process (the second task's runc init
	// included), cgroup or mount of the namespace may be left.
}

// loseTask leaves task id as containerd leaves a task whose create it gave up on
// while the shim finished it: containerd killed, its cleanup of a dead shim run
// (runc's delete --force, by the shim binary's delete command) when runcDeleted,
// the bundle deleted, containerd started again; then the container's record is
// deleted, as shimd's recovery deletes an unfinished one.
func loseTask(t *testing.T, env *harness.Env, id string, runcDeleted bool) {
	t.Helper()
	ns := env.Containerd.Namespace()
	ctx := namespaces.WithNamespace(context.Background(), ns)
	bundle := filepath.Join(env.Containerd.State(), "io.containerd.runtime.v2.task", ns, id)
	env.Containerd.Kill()
	if runcDeleted {
		cmd := exec.Command(filepath.Join(harness.Tools().BinDir, "containerd-shim-runc-v2"), "-namespace", ns,
			"-address", env.Containerd.Address(), "-publish-binary", harness.Tools().Containerd,
			"-id", id, "-bundle", bundle, "delete")
		cmd.Dir = bundle
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	gone := filepath.Join(filepath.Dir(bundle), "."+id)
	require.NoError(t, os.Rename(bundle, gone))
	_ = syscall.Unmount(filepath.Join(gone, "rootfs"), 0)
	require.NoError(t, os.RemoveAll(gone))
	env.Containerd.Restart(t)
	c, err := env.Containerd.Client(t).LoadContainer(ctx, id)
	require.NoError(t, err)
	_, err = c.Task(ctx, nil)
	require.Error(t, err, "containerd forgot the task")
	require.NoError(t, c.Delete(ctx, client.WithSnapshotCleanup))
}

// createdTask creates container id from busybox with annotations and its task,
// created, not started, in the harness's runc root (not the shim's default, which all
// daemons share).
func createdTask(t *testing.T, env *harness.Env, id string, annotations map[string]string) client.Task {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), env.Containerd.Namespace())
	cl := env.Containerd.Client(t)
	img, err := cl.GetImage(ctx, busyboxImage)
	require.NoError(t, err)
	runtime := client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{BinaryName: harness.Tools().Runc, Root: filepath.Join(env.Containerd.Dir(), "runc")})
	c, err := cl.NewContainer(ctx, id, runtime, client.WithSnapshotter("overlayfs"), client.WithNewSnapshot(id, img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "1000"), oci.WithAnnotations(annotations)))
	require.NoError(t, err)
	task, err := c.NewTask(ctx, cio.NullIO)
	require.NoError(t, err)
	return task
}

// shimsOf are the pids of env's shims started for task id.
func shimsOf(t *testing.T, env *harness.Env, id string) []int {
	t.Helper()
	pids, err := harness.ShimPIDsOf(env.Containerd.Address(), id)
	require.NoError(t, err)
	return pids
}

// The same in a shim that two tasks share, as a pause-less pod's containers do (the
// runc shim groups tasks by the io.kubernetes.cri.sandbox-id annotation): the task
// the shim was started for is deleted normally, which deletes the shim's working
// directory, and the other one is lost as above, its dead-shim cleanup run. Nobody
// knows the lost task's id any more, nor the group the shim's socket is named
// after; the shim runs no process and does not shut down. shimd's sweep kills it.
func TestSharedShimWithLostTaskIsStopped(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	ctx := namespaces.WithNamespace(context.Background(), env.Containerd.Namespace())
	first, lost, group := fmt.Sprintf("%064x", 0xc0), fmt.Sprintf("%064x", 0xc1), fmt.Sprintf("%064x", 0xc2)
	shared := map[string]string{"io.kubernetes.cri.sandbox-id": group}
	firstTask := createdTask(t, env, first, shared)
	createdTask(t, env, lost, shared)
	require.Len(t, shimsOf(t, env, first), 1)
	require.Empty(t, shimsOf(t, env, lost), "the second task joined the first one's shim")
	// The first task goes the normal way, and its bundle, the shim's working
	// directory, with it; the shim stays for the other task.
	_, err := firstTask.Delete(ctx, client.WithProcessKill)
	require.NoError(t, err)
	c, err := env.Containerd.Client(t).LoadContainer(ctx, first)
	require.NoError(t, err)
	require.NoError(t, c.Delete(ctx, client.WithSnapshotCleanup))
	require.Len(t, shimsOf(t, env, first), 1)

	loseTask(t, env, lost, true)
	require.Len(t, shimsOf(t, env, first), 1, "the shim outlives both tasks")

	env.Shimd.Kill9()
	env.Shimd.Start(t)
	waitReady(t, env.Shimd.Runtime(t))
	require.Eventually(t, func() bool { return len(shimsOf(t, env, first)) == 0 }, 30*time.Second, 100*time.Millisecond,
		"the shared shim that holds a lost task and runs no process")
}
