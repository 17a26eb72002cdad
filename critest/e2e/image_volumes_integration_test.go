//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Image volumes (CRI Mount.image): a pulled image is mounted read-only into
// containers, whole or a directory of it, once per pod; bad requests get clear
// errors; removing the pod unmounts it and removes its snapshot (the harness's leak
// check sees no mount or snapshot left), also after a crash of shimd.
func TestImageVolumes(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	imageID := pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "imgvol")

	cfg := pod.container("whole", "sleep", "3600")
	cfg.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}},
		{ContainerPath: "/bin-only", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}, ImageSubPath: "bin"},
	}
	id := pod.run(cfg)
	out, err := execSync(t, rs, id, 10, "sh", "-c", "ls /vol/bin/busybox /bin-only/busybox && /vol/bin/busybox echo ran-from-volume")
	require.NoError(t, err)
	require.Contains(t, string(out.Stdout), "ran-from-volume", "%s", out.Stderr)
	out, err = execSync(t, rs, id, 10, "sh", "-c", "touch /vol/x 2>&1; echo rc=$?")
	require.NoError(t, err)
	require.Contains(t, string(out.Stdout), "Read-only file system")

	// A second container of the pod shares the same mount.
	id2 := pod.run(pod.container("second", "sleep", "3600"))
	_ = id2
	cfg3 := pod.container("third", "sleep", "3600")
	cfg3.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}}}
	id3 := pod.run(cfg3)
	st1, st3 := containerStatus(t, rs, id), containerStatus(t, rs, id3)
	require.Equal(t, st1.Mounts[0].HostPath, st3.Mounts[0].HostPath)
	require.True(t, strings.HasPrefix(st1.Mounts[0].HostPath, env.Shimd.StateDir()), "%s", st1.Mounts[0].HostPath)
	require.Equal(t, filepath.Join(st1.Mounts[0].HostPath, "bin"), st1.Mounts[1].HostPath)
	// Each image volume's status names the image's id, as PullImage answered it.
	for _, m := range append(st1.Mounts, st3.Mounts...) {
		require.Equal(t, imageID, m.GetImage().GetImageRef(), m.ContainerPath)
		require.Equal(t, busyboxImage, m.GetImage().GetImage(), m.ContainerPath)
	}

	bad := []struct {
		name string
		m    *runtimeapi.Mount
		code codes.Code
	}{
		{"writable", &runtimeapi.Mount{ContainerPath: "/v", Image: &runtimeapi.ImageSpec{Image: busyboxImage}}, codes.InvalidArgument},
		{"escape", &runtimeapi.Mount{ContainerPath: "/v", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}, ImageSubPath: "../../.."}, codes.InvalidArgument},
		{"missing-subpath", &runtimeapi.Mount{ContainerPath: "/v", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}, ImageSubPath: "no/such/dir"}, codes.InvalidArgument},
		{"absent-image", &runtimeapi.Mount{ContainerPath: "/v", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "docker.io/library/notpulled:1"}}, codes.NotFound},
	}
	for _, tt := range bad {
		c := pod.container("bad-"+tt.name, "true")
		c.Mounts = []*runtimeapi.Mount{tt.m}
		_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: c, SandboxConfig: pod.cfg})
		require.Equal(t, tt.code, status.Code(err), "%s: %v", tt.name, err)
	}

	// kill -9 with the volume mounted; the restarted shimd still removes it with the pod.
	rs = restartShimd(t, env)
	stopRemove(t, rs, pod.id)
	require.NoDirExists(t, filepath.Dir(st1.Mounts[0].HostPath))
	for _, n := range snapshotNames(t, env.Containerd.Client(t)) {
		require.False(t, strings.HasPrefix(n, "shimd-imagevolume/"), "snapshot %s left", n)
	}
}

// After a reboot the state directory and its mounts are gone while the view
// snapshots remain on disk: recovery removes such views, and the pod is still removed
// cleanly (simulated: shimd killed, the volume unmounted and its directory removed).
func TestImageVolumeViewsWithoutStateAreRemoved(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "imgvol-reboot")
	cfg := pod.container("whole", "sleep", "3600")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}}}
	id := pod.run(cfg)
	target := containerStatus(t, rs, id).Mounts[0].HostPath
	_, err := rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
	require.NoError(t, err)

	env.Shimd.Kill9()
	require.NoError(t, unix.Unmount(target, 0))
	require.NoError(t, os.RemoveAll(filepath.Dir(target)))
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	waitReady(t, rs)
	for _, n := range snapshotNames(t, env.Containerd.Client(t)) {
		require.False(t, strings.HasPrefix(n, "shimd-imagevolume/"), "view %s left after recovery", n)
	}
	stopRemove(t, rs, pod.id)
}
