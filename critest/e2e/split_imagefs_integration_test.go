//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// splitEnv starts containerd with its overlayfs snapshotter (the image filesystem)
// on one small loop-mounted filesystem and shimd with container_fs_dir on another.
func splitEnv(t *testing.T) (env *harness.Env, imageFs, containerFs string) {
	t.Helper()
	imageFs = filepath.Join(harness.LoopFS(t, "200M"), "snapshotter")
	containerFs = filepath.Join(harness.LoopFS(t, "200M"), "containers")
	env, _ = imageEnv(t, harness.Options{
		Containerd: harness.ContainerdOptions{ExtraConfig: fmt.Sprintf("[plugins.'io.containerd.snapshotter.v1.overlayfs']\n  root_path = %q\n", imageFs)},
		Shimd:      harness.ShimdOptions{ExtraConfig: fmt.Sprintf("container_fs_dir = %q\n", containerFs)},
	})
	return env, imageFs, containerFs
}

// statfsUsed is what a filesystem has in use (statfs), in bytes.
func statfsUsed(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(path, &st))
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

func imageFsInfo(t *testing.T, env *harness.Env) (image, container *runtimeapi.FilesystemUsage) {
	t.Helper()
	resp, err := env.Shimd.Images(t).ImageFsInfo(ctxT(t, time.Minute), &runtimeapi.ImageFsInfoRequest{})
	require.NoError(t, err)
	require.Len(t, resp.ImageFilesystems, 1)
	require.Len(t, resp.ContainerFilesystems, 1)
	return resp.ImageFilesystems[0], resp.ContainerFilesystems[0]
}

const oneMiB = int64(1 << 20)

// A split image filesystem (container_fs_dir): ImageFsInfo reports the two
// filesystems; what a container writes into its root filesystem lands on the
// container filesystem (ImageFsInfo, ContainerStats and statfs agree), not on the
// image filesystem; removal frees it; a crash of shimd leaves no orphaned writable
// layer behind.
func TestSplitImageFilesystem(t *testing.T) {
	requireRoot(t)
	env, imageFs, containerFs := splitEnv(t)
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)

	img, ctr := imageFsInfo(t, env)
	require.Equal(t, imageFs, img.FsId.Mountpoint)
	require.Equal(t, containerFs, ctr.FsId.Mountpoint)
	var imgSt, ctrSt unix.Stat_t
	require.NoError(t, unix.Stat(imageFs, &imgSt))
	require.NoError(t, unix.Stat(containerFs, &ctrSt))
	require.NotEqual(t, imgSt.Dev, ctrSt.Dev, "the two mountpoints are on one filesystem")
	require.Greater(t, img.UsedBytes.Value, uint64(oneMiB), "busybox's layer is on the image filesystem")
	t.Logf("after the pull: image fs %s used %d B (statfs %d B), container fs %s used %d B (statfs %d B)",
		imageFs, img.UsedBytes.Value, statfsUsed(t, imageFs), containerFs, ctr.UsedBytes.Value, statfsUsed(t, containerFs))

	p := newPod(t, rs, "split")
	id := p.run(p.container("writer", "sleep", "3600"))
	upper := filepath.Join(containerFs, id, "fs")
	require.DirExists(t, upper)
	img0, ctr0 := imageFsInfo(t, env)
	imgUsed0, ctrUsed0 := statfsUsed(t, imageFs), statfsUsed(t, containerFs)

	const written = 64 * oneMiB
	res, err := execSync(t, rs, id, 60, "dd", "if=/dev/zero", "of=/big", "bs=1M", fmt.Sprint("count=", written/oneMiB), "conv=fsync")
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "dd: %s", res.Stderr)
	require.FileExists(t, filepath.Join(upper, "big"))

	img1, ctr1 := imageFsInfo(t, env)
	imgUsed1, ctrUsed1 := statfsUsed(t, imageFs), statfsUsed(t, containerFs)
	t.Logf("after writing %d MiB: ImageFsInfo image %d -> %d B, container %d -> %d B; statfs image %d -> %d B, container %d -> %d B",
		written/oneMiB, img0.UsedBytes.Value, img1.UsedBytes.Value, ctr0.UsedBytes.Value, ctr1.UsedBytes.Value,
		imgUsed0, imgUsed1, ctrUsed0, ctrUsed1)
	require.GreaterOrEqual(t, int64(ctr1.UsedBytes.Value-ctr0.UsedBytes.Value), written, "ImageFsInfo: container fs usage did not grow")
	require.Less(t, int64(img1.UsedBytes.Value)-int64(img0.UsedBytes.Value), oneMiB, "ImageFsInfo: image fs usage grew")
	require.GreaterOrEqual(t, ctrUsed1-ctrUsed0, written, "statfs: the container filesystem did not fill")
	require.Less(t, imgUsed1-imgUsed0, oneMiB, "statfs: the image filesystem filled")

	stats, err := rs.ContainerStats(ctxT(t, time.Minute), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	require.NoError(t, err)
	wl := stats.Stats.WritableLayer
	require.NotNil(t, wl)
	t.Logf("ContainerStats writable layer: %s, %d B, %d inodes", wl.FsId.Mountpoint, wl.UsedBytes.Value, wl.InodesUsed.Value)
	require.Equal(t, containerFs, wl.FsId.Mountpoint)
	require.GreaterOrEqual(t, int64(wl.UsedBytes.Value), written)

	// A crash: the running container's layer stays, an orphan (a create cut short)
	// goes, and so does a layer whose container is gone.
	env.Shimd.Kill9()
	orphan := filepath.Join(containerFs, strings.Repeat("ab", 32))
	require.NoError(t, os.MkdirAll(filepath.Join(orphan, "fs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(orphan, "fs", "data"), make([]byte, oneMiB), 0o644))
	notOurs := filepath.Join(containerFs, "not-a-container")
	require.NoError(t, os.Mkdir(notOurs, 0o755))
	env.Shimd.Start(t)
	waitReady(t, rs)
	require.NoDirExists(t, orphan, "an orphaned writable layer survived recovery")
	require.DirExists(t, notOurs, "recovery removed a directory that is not a container's")
	require.NoError(t, os.Remove(notOurs))
	require.FileExists(t, filepath.Join(upper, "big"))
	res, err = execSync(t, rs, id, 30, "ls", "-l", "/big")
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "the container lost its writes over the restart: %s", res.Stderr)

	stopRemove(t, rs, p.id)
	require.NoDirExists(t, filepath.Join(containerFs, id))
	entries, err := os.ReadDir(containerFs)
	require.NoError(t, err)
	require.Empty(t, entries, "writable layers left in container_fs_dir")
	_, ctr2 := imageFsInfo(t, env)
	ctrUsed2 := statfsUsed(t, containerFs)
	t.Logf("after removal: ImageFsInfo container %d B; statfs container %d B", ctr2.UsedBytes.Value, ctrUsed2)
	require.Less(t, int64(ctr2.UsedBytes.Value), written/2, "ImageFsInfo: removal did not free the container fs")
	require.Less(t, ctrUsed2-ctrUsed0, oneMiB, "statfs: removal did not free the container filesystem")
	env.CheckNoLeaks(t)
}

// A checkpoint of a container whose writable layer is split (container_fs_dir): its
// rootfs-diff.tar holds what the container wrote, and a restore puts it back into
// the restored container's own layer there.
func TestCheckpointRestoreSplitImageFilesystem(t *testing.T) {
	requireRoot(t)
	requireCRIU(t)
	env, _, containerFs := splitEnv(t)
	pull(t, env, busyboxImage)
	checkpointRestoreContainer(t, env, env.Shimd.Runtime(t))
	entries, err := os.ReadDir(containerFs)
	require.NoError(t, err)
	require.Empty(t, entries, "writable layers left in container_fs_dir")
}
