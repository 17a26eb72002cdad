//go:build integration

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// fill writes zeros to path until the filesystem under it is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, unix.ENOSPC)
			return
		}
	}
}

// onTmpfs moves dir, one of shimd's directories, onto a tmpfs mounted with opts:
// shimd is stopped, the contents copied over and shimd started again. The test
// unmounts it before its leak check; a cleanup does if it fails first.
func onTmpfs(t *testing.T, env *harness.Env, dir, opts string) {
	t.Helper()
	env.Shimd.Stop()
	saved := t.TempDir()
	require.NoError(t, exec.Command("cp", "-a", dir+"/.", saved).Run())
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, opts))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	require.NoError(t, exec.Command("cp", "-a", saved+"/.", dir).Run())
	env.Shimd.Start(t)
}

// shimd's root dir on a small tmpfs that fills up: a new pod and a new container
// are ResourceExhausted with nothing half-made; what runs goes on and can be
// inspected, stopped and removed; once there is room again, pods run as before.
func TestRootDirFull(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	root := env.Shimd.RootDir()
	onTmpfs(t, env, root, "size=16m,mode=0700")
	rs := env.Shimd.Runtime(t)

	p := newPod(t, rs, "full-running")
	running := p.run(p.container("running", "sleep", "3600"))
	podsBefore, ctrsBefore := len(listPods(t, rs, nil)), len(listContainers(t, rs))

	filler := filepath.Join(root, "filler")
	fill(t, filler)
	ctx := ctxT(t, time.Minute)
	cfg := podConfig("full-new")
	cfg.LogDirectory = t.TempDir()
	_, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "RunPodSandbox on a full root dir: %v", err)
	t.Logf("RunPodSandbox: %v", err)
	_, err = rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: p.container("new", "sleep", "3600"), SandboxConfig: p.cfg})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "CreateContainer on a full root dir: %v", err)
	t.Logf("CreateContainer: %v", err)
	require.Len(t, listPods(t, rs, nil), podsBefore, "a refused pod is listed")
	require.Len(t, listContainers(t, rs), ctrsBefore, "a refused container is listed")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, running).State)
	_, err = execSync(t, rs, running, 10, "true")
	require.NoError(t, err)

	// Room again: everything works, the full-disk attempts left nothing.
	require.NoError(t, os.Remove(filler))
	p2 := newPod(t, rs, "full-new")
	p2.run(p2.container("new", "sleep", "3600"))
	stopRemove(t, rs, p2.id)
	stopRemove(t, rs, p.id)
	entries, err := os.ReadDir(filepath.Join(root, "sandboxes"))
	require.NoError(t, err)
	require.Empty(t, entries, "pod files left in the root dir")
	require.NoError(t, unix.Unmount(root, unix.MNT_DETACH))
	env.CheckNoLeaks(t)
}

// shimd's state dir (network namespace pins, stdio FIFOs, shm mount points) on a
// tmpfs out of inodes: new pods and containers are ResourceExhausted with nothing
// half-made, what runs goes on, and pods run again once inodes are free.
func TestStateDirOutOfInodes(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	state := env.Shimd.StateDir()
	onTmpfs(t, env, state, "size=64m,nr_inodes=4096,mode=0755")
	rs := env.Shimd.Runtime(t)
	p := newPod(t, rs, "inodes-running")
	running := p.run(p.container("running", "sleep", "3600"))
	podsBefore, ctrsBefore := len(listPods(t, rs, nil)), len(listContainers(t, rs))

	// Use up the inodes.
	fillDir := filepath.Join(state, "filler")
	require.NoError(t, os.Mkdir(fillDir, 0o700))
	for i := 0; ; i++ {
		if f, err := os.Create(filepath.Join(fillDir, fmt.Sprint(i))); err != nil {
			require.ErrorIs(t, err, unix.ENOSPC)
			break
		} else {
			f.Close()
		}
	}
	ctx := ctxT(t, time.Minute)
	cfg := podConfig("inodes-new")
	cfg.LogDirectory = t.TempDir()
	_, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "RunPodSandbox without inodes in the state dir: %v", err)
	t.Logf("RunPodSandbox: %v", err)
	created, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: p.container("new", "sleep", "3600"), SandboxConfig: p.cfg})
	if err == nil {
		// CreateContainer makes nothing in the state dir; its start makes the FIFOs.
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "StartContainer without inodes in the state dir: %v", err)
		t.Logf("StartContainer: %v", err)
		_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId})
		require.NoError(t, err)
	} else {
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "CreateContainer without inodes in the state dir: %v", err)
	}
	require.Len(t, listPods(t, rs, nil), podsBefore, "a refused pod is listed")
	require.Len(t, listContainers(t, rs), ctrsBefore, "a refused container is listed")
	// The running container runs on; an exec needs FIFOs there too, and says so.
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, running).State)
	_, err = execSync(t, rs, running, 10, "true")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "ExecSync without inodes in the state dir: %v", err)

	require.NoError(t, os.RemoveAll(fillDir))
	_, err = execSync(t, rs, running, 10, "true")
	require.NoError(t, err, "exec once there are inodes again")
	p2 := newPod(t, rs, "inodes-new")
	p2.run(p2.container("new", "sleep", "3600"))
	stopRemove(t, rs, p2.id)
	stopRemove(t, rs, p.id)
	require.NoError(t, unix.Unmount(state, unix.MNT_DETACH))
	env.CheckNoLeaks(t)
}
