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

// runningThenFull starts a pod with a running container, counts the pods and
// containers listed, then fills the filesystem of dir with a file, filler.
func runningThenFull(t *testing.T, rs runtimeapi.RuntimeServiceClient, name, dir string) (p *podFixture, running string, pods, ctrs int, filler string) {
	t.Helper()
	p = newPod(t, rs, name)
	running = p.run(p.container("running", "sleep", "3600"))
	pods, ctrs = len(listPods(t, rs, nil)), len(listContainers(t, rs))
	filler = filepath.Join(dir, "filler")
	fill(t, filler)
	return p, running, pods, ctrs, filler
}

// onTmpfs moves dir, one of shimd's directories, onto a tmpfs mounted with opts:
// shimd is stopped, the contents copied over and shimd started again. The test
// unmounts it before its leak check; a cleanup does if it fails first.
func onTmpfs(t *testing.T, env *harness.Env, dir, opts string) {
	t.Helper()
	env.Shimd.Stop()
	tmpfsOver(t, dir, opts)
	env.Shimd.Start(t)
}

// tmpfsOver mounts a tmpfs with opts over dir, with dir's contents copied onto it;
// whoever uses dir must be stopped. A cleanup unmounts it.
func tmpfsOver(t *testing.T, dir, opts string) {
	t.Helper()
	saved := t.TempDir()
	require.NoError(t, exec.Command("cp", "-a", dir+"/.", saved).Run())
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, opts))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	require.NoError(t, exec.Command("cp", "-a", saved+"/.", dir).Run())
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

	p, running, podsBefore, ctrsBefore, filler := runningThenFull(t, rs, "full-running", root)
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

// containerd's root (content, snapshots, its metadata database) on a small tmpfs that
// fills up: a new pod and a new container are ResourceExhausted, or refused with a
// clear error naming the full disk, with nothing half-made; the running container
// goes on; once there is room again, pods run as before and nothing is left.
func TestContainerdRootFull(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	// containerd's root onto a tmpfs, with the images pulled so far: stopped first,
	// as shimd's dirs are (onTmpfs).
	root := env.Containerd.Root()
	env.Shimd.Stop()
	env.Containerd.Stop()
	tmpfsOver(t, root, "size=256m,mode=0700")
	env.Containerd.Restart(t)
	env.Shimd.Start(t)
	rs := env.Shimd.Runtime(t)
	waitRuntimeReady(t, rs)

	p, running, podsBefore, ctrsBefore, filler := runningThenFull(t, rs, "ctrd-full-running", root)
	ctx := ctxT(t, time.Minute)
	refused := func(what string, err error) {
		t.Helper()
		require.Error(t, err, "%s on a full containerd root", what)
		if status.Code(err) != codes.ResourceExhausted {
			require.Contains(t, err.Error(), "no space left on device", "%s on a full containerd root: neither ResourceExhausted nor naming the full disk", what)
		}
		t.Logf("%s: %v", what, err)
	}
	cfg := podConfig("ctrd-full-new")
	cfg.LogDirectory = t.TempDir()
	_, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	refused("RunPodSandbox", err)
	created, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: p.container("new", "sleep", "3600"), SandboxConfig: p.cfg})
	if err == nil {
		// A writable layer may need no new block on the full disk; its task then does.
		_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
		refused("StartContainer", err)
		_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId})
		require.NoError(t, err)
	} else {
		refused("CreateContainer", err)
	}
	require.Len(t, listPods(t, rs, nil), podsBefore, "a refused pod is listed")
	require.Len(t, listContainers(t, rs), ctrsBefore, "a refused container is listed")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, running).State)
	_, err = execSync(t, rs, running, 10, "true")
	require.NoError(t, err, "exec in the running container while containerd's root is full")

	// Room again: everything works, the full-disk attempts left nothing.
	require.NoError(t, os.Remove(filler))
	p2 := newPod(t, rs, "ctrd-full-new")
	p2.run(p2.container("new", "sleep", "3600"))
	stopRemove(t, rs, p2.id)
	stopRemove(t, rs, p.id)
	// Back onto the disk, as it is now (the leak check reads containerd's metadata,
	// and counts any mount under its root, the tmpfs too).
	env.Shimd.Stop()
	env.Containerd.Stop()
	after := t.TempDir()
	require.NoError(t, exec.Command("cp", "-a", root+"/.", after).Run())
	require.NoError(t, unix.Unmount(root, 0))
	require.NoError(t, os.RemoveAll(root))
	require.NoError(t, os.Mkdir(root, 0o700))
	require.NoError(t, exec.Command("cp", "-a", after+"/.", root).Run())
	env.Containerd.Restart(t)
	env.Shimd.Start(t)
	waitRuntimeReady(t, env.Shimd.Runtime(t))
	env.CheckNoLeaks(t)
}
