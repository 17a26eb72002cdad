//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"slices"
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

// CRI features a Kubernetes 1.37 kubelet uses, on real containerd, runc and kernel:
// procMount lists, stop signals, the evented-PLEG pod status, mount options, a pod
// user namespace with the node's network, image volumes in a pod user namespace.

// mountLine is the /proc/self/mountinfo line of a mount point in a container, "" when
// nothing is mounted there.
func mountLine(t *testing.T, rs runtimeapi.RuntimeServiceClient, id, dst string) string {
	t.Helper()
	for _, l := range strings.Split(out(t, rs, id, "cat", "/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == dst {
			return l
		}
	}
	return ""
}

// procMount Unmasked: the kubelet sends no masked or read-only paths (nil over the
// wire), and the container's /proc is not masked; with the lists, it is.
func TestProcMountLists(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPod(t, rs, "procmount")

	unmasked := p.run(p.container("unmasked", "sleep", "3600"))
	// /proc/timer_list: /proc/kcore does not exist on every kernel (runc skips what is missing).
	require.Empty(t, mountLine(t, rs, unmasked, "/proc/timer_list"), "nil lists: /proc/timer_list is not masked")
	require.Empty(t, mountLine(t, rs, unmasked, "/proc/sys"), "nil lists: /proc/sys is not a read-only bind")

	cfg := p.container("masked", "sleep", "3600")
	cfg.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore", "/proc/timer_list"}
	cfg.Linux.SecurityContext.ReadonlyPaths = []string{"/proc/sys"}
	masked := p.run(cfg)
	require.NotEmpty(t, mountLine(t, rs, masked, "/proc/timer_list"), "given lists: /proc/timer_list is masked")
	require.Contains(t, strings.Fields(mountLine(t, rs, masked, "/proc/sys"))[5], "ro")
	stopRemove(t, rs, p.id)

	if env.Containerd.MajorVersion() < 2 {
		t.Log("user namespace part skipped: containerd 1.6 and runc 1.1 cannot run them")
		env.CheckNoLeaks(t)
		return
	}
	// hostUsers: false with procMount Unmasked, the case the kubelet allows it for.
	up := newPodOf(t, rs, usernsPodConfig("procmount-userns", runtimeapi.NamespaceMode_POD))
	uc := up.container("unmasked", "sleep", "3600")
	uc.Linux.SecurityContext.NamespaceOptions = up.cfg.Linux.SecurityContext.NamespaceOptions
	uid := up.run(uc)
	require.Empty(t, mountLine(t, rs, uid, "/proc/timer_list"))
	require.Equal(t, "0 300000 65536", strings.Join(strings.Fields(out(t, rs, uid, "cat", "/proc/self/uid_map")), " "))
	stopRemove(t, rs, up.id)
	env.CheckNoLeaks(t)
}

// oneLayerImage is an image of one layer (the offline pause image, critest/images).
const oneLayerImage = "registry.k8s.io/pause:3.10.2"

// usernsPodConfig is a pod with its own user namespace (0 -> 300000, 65536 ids) and
// the given network mode.
func usernsPodConfig(name string, network runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	ids := []*runtimeapi.IDMapping{{HostId: 300000, ContainerId: 0, Length: 65536}}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: network, Pid: runtimeapi.NamespaceMode_CONTAINER,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}}
	if network == runtimeapi.NamespaceMode_NODE {
		cfg.Hostname, cfg.DnsConfig = "", nil
	}
	return cfg
}

// A container's stop_signal is what StopContainer sends, before the image's; the
// status reports the signal that stops it. A value outside the enum is refused
// before anything is created.
func TestStopSignal(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPodOf(t, rs, pausePodConfig("stopsig"))

	script := `trap 'echo got-usr1; exit 0' USR1; trap '' TERM; echo ready; while :; do sleep 0.1; done`
	cfg := p.container("usr1", "sh", "-c", script)
	cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
	id := p.run(cfg)
	waitLog(t, filepath.Join(p.logDir, "usr1.log"), "ready")
	require.Equal(t, runtimeapi.Signal_SIGNAL_SIGUSR1, containerStatus(t, rs, id).StopSignal)
	start := time.Now()
	_, err := rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 30})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 20*time.Second, "the stop signal ended it, not the SIGKILL after the grace period")
	st := containerStatus(t, rs, id)
	require.Equal(t, int32(0), st.ExitCode, "the USR1 trap exits 0")
	waitLog(t, filepath.Join(p.logDir, "usr1.log"), "got-usr1")

	plain := p.run(p.container("plain", "sleep", "3600"))
	require.Equal(t, runtimeapi.Signal_SIGNAL_SIGTERM, containerStatus(t, rs, plain).StopSignal)

	before := listContainers(t, rs)
	bad := p.container("bad", "sleep", "1")
	bad.StopSignal = 99
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: bad, SandboxConfig: p.cfg})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "config.stop_signal")
	require.Len(t, listContainers(t, rs), len(before))

	// evented_pleg_status is off by default: the pod's status has no timestamp and
	// no container statuses (TestPodSandboxStatusCarriesContainers turns it on).
	resp, err := rs.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id})
	require.NoError(t, err)
	require.Zero(t, resp.Timestamp)
	require.Empty(t, resp.ContainersStatuses)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, resp.Status.State)
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// With evented_pleg_status, PodSandboxStatus carries a timestamp and every
// container's status, so that an evented-PLEG kubelet makes no ContainerStatus call
// per container. Without it (the default) it carries neither.
func TestPodSandboxStatusCarriesContainers(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: "evented_pleg_status = true\n"}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPod(t, rs, "pleg")
	other := newPod(t, rs, "pleg-other")
	other.run(other.container("elsewhere", "sleep", "3600"))

	running := p.run(p.container("running", "sleep", "3600"))
	done := p.run(p.container("done", "true"))
	created := p.create(p.container("created", "true"))
	waitExited(t, rs, done)

	before := time.Now().UnixNano()
	resp, err := rs.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id})
	require.NoError(t, err)
	require.GreaterOrEqual(t, resp.Timestamp, before)
	require.LessOrEqual(t, resp.Timestamp, time.Now().UnixNano())
	got := map[string]runtimeapi.ContainerState{}
	for i, cs := range resp.ContainersStatuses {
		got[cs.Id] = cs.State
		require.Equal(t, containerStatus(t, rs, cs.Id).FinishedAt, cs.FinishedAt)
		if i > 0 {
			// Newest first: the kubelet takes the first status of a name as the latest.
			require.GreaterOrEqual(t, resp.ContainersStatuses[i-1].CreatedAt, cs.CreatedAt)
		}
	}
	require.Equal(t, created, resp.ContainersStatuses[0].Id, "the newest container comes first")
	require.Equal(t, map[string]runtimeapi.ContainerState{
		running: runtimeapi.ContainerState_CONTAINER_RUNNING, done: runtimeapi.ContainerState_CONTAINER_EXITED,
		created: runtimeapi.ContainerState_CONTAINER_CREATED,
	}, got)
	stopRemove(t, rs, p.id)
	stopRemove(t, rs, other.id)
	env.CheckNoLeaks(t)
}

// Mount.mount_options: noexec, nosuid and nodev reach the bind mount and the mounts
// under it, also on a read-only mount; words outside the allowlist are refused.
func TestMountOptions(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	sresp, err := rs.Status(ctxT(t, 10*time.Second), &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	require.True(t, sresp.Features.GetMountOptions())

	host := t.TempDir()
	sub := filepath.Join(host, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	require.NoError(t, unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	for _, dir := range []string{host, sub} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	}

	p := newPod(t, rs, "mountopts")
	plain := p.container("plain", "sleep", "3600")
	plain.Mounts = []*runtimeapi.Mount{{HostPath: host, ContainerPath: "/data"}}
	pid := p.run(plain)
	require.Equal(t, "ran\nran", out(t, rs, pid, "sh", "-c", "/data/run.sh && /data/sub/run.sh"))

	cfg := p.container("noexec", "sleep", "3600")
	cfg.Mounts = []*runtimeapi.Mount{
		{HostPath: host, ContainerPath: "/data", MountOptions: []string{"noexec", "nosuid", "nodev"}},
		{HostPath: host, ContainerPath: "/ro", Readonly: true, MountOptions: []string{"noexec"}},
	}
	id := p.run(cfg)
	flags := strings.Split(strings.Fields(mountLine(t, rs, id, "/data"))[5], ",")
	require.Subset(t, flags, []string{"rw", "noexec", "nosuid", "nodev"})
	require.Subset(t, strings.Split(strings.Fields(mountLine(t, rs, id, "/data/sub"))[5], ","), []string{"noexec", "nosuid", "nodev"},
		"a mount under the volume gets the flags too")
	require.Subset(t, strings.Split(strings.Fields(mountLine(t, rs, id, "/ro"))[5], ","), []string{"ro", "noexec"})
	for _, script := range []string{"/data/run.sh", "/data/sub/run.sh", "/ro/run.sh"} {
		resp, err := execSync(t, rs, id, 10, script)
		require.NoError(t, err)
		require.NotZero(t, resp.ExitCode, "%s ran on a noexec mount", script)
		require.Contains(t, strings.ToLower(string(resp.Stdout)+string(resp.Stderr)), "permission denied", script)
	}

	before := listContainers(t, rs)
	for _, bad := range []string{"exec", "rshared", "rbind", "size=1m"} {
		c := p.container("bad", "true")
		c.Mounts = []*runtimeapi.Mount{{HostPath: host, ContainerPath: "/data", MountOptions: []string{"noexec", bad}}}
		_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: c, SandboxConfig: p.cfg})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", bad, err)
		require.Contains(t, err.Error(), "config.mounts[0].mount_options[1]", bad)
		require.Contains(t, err.Error(), `"`+bad+`"`)
	}
	require.Len(t, listContainers(t, rs), len(before), "a refused mount option creates nothing")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// A pod with its own user namespace and the node's network (hostNetwork with
// hostUsers: false): the containers are in the pod's user namespace and the host's
// network namespace, see the host's /sys read-only, and id-mapped volumes work, with
// mount options. Image volumes in such a pod are id-mapped: the image's root-owned
// files are root's in the pod.
func TestUserNamespaceHostNetworkAndImageVolume(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	if env.Containerd.MajorVersion() < 2 {
		t.Skip("containerd 1.6 and runc 1.1 cannot run pod user namespaces")
	}
	pull(t, env, busyboxImage)
	pull(t, env, oneLayerImage)
	rs := env.Shimd.Runtime(t)
	sresp, err := rs.Status(ctxT(t, 10*time.Second), &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	require.True(t, sresp.Features.GetUserNamespacesHostNetwork())

	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "owned"), []byte("x"), 0o644))
	p := newPodOf(t, rs, usernsPodConfig("userns-hostnet", runtimeapi.NamespaceMode_NODE))
	cfg := p.container("main", "sleep", "3600")
	cfg.Linux.SecurityContext.NamespaceOptions = p.cfg.Linux.SecurityContext.NamespaceOptions
	ids := p.cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids
	cfg.Mounts = []*runtimeapi.Mount{
		{HostPath: host, ContainerPath: "/data", UidMappings: ids, GidMappings: ids, MountOptions: []string{"noexec", "nodev"}},
		// The kubelet sends the pod's mappings with every mount of such a pod.
		{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}, UidMappings: ids, GidMappings: ids},
		// One layer: its view is a bind mount, not an overlay.
		{ContainerPath: "/onelayer", Readonly: true, Image: &runtimeapi.ImageSpec{Image: oneLayerImage}},
	}
	id := p.run(cfg)
	require.Equal(t, "0 300000 65536", strings.Join(strings.Fields(out(t, rs, id, "cat", "/proc/self/uid_map")), " "))
	require.Equal(t, nsInode(t, "/proc/self/ns/net"), containerNS(t, rs, id, "net"), "the node's network namespace")
	require.Contains(t, strings.Fields(out(t, rs, id, "ls", "/sys/class/net")), "lo")
	require.Contains(t, strings.Split(strings.Fields(mountLine(t, rs, id, "/sys"))[5], ","), "ro")
	require.Equal(t, "0 0", out(t, rs, id, "stat", "-c", "%u %g", "/data/owned"), "the id-mapped volume's root-owned file is root's")
	require.Subset(t, strings.Split(strings.Fields(mountLine(t, rs, id, "/data"))[5], ","), []string{"noexec", "nodev"})
	require.Equal(t, "0 0", out(t, rs, id, "stat", "-c", "%u %g", "/vol/bin/busybox"), "the image volume is id-mapped")
	require.Equal(t, "from-volume", out(t, rs, id, "/vol/bin/busybox", "echo", "from-volume"))
	require.Equal(t, "0 0", out(t, rs, id, "stat", "-c", "%u %g", "/onelayer/pause"), "the one-layer image volume is id-mapped")
	require.True(t, slices.Contains(strings.Fields(out(t, rs, id, "sh", "-c", "ls /vol")), "bin"))

	// Other mappings than the pod's on an image volume: refused before anything is made.
	bad := p.container("bad", "true")
	bad.Linux.SecurityContext.NamespaceOptions = p.cfg.Linux.SecurityContext.NamespaceOptions
	other := []*runtimeapi.IDMapping{{HostId: 400000, ContainerId: 0, Length: 65536}}
	bad.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: busyboxImage}, UidMappings: other, GidMappings: other}}
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: bad, SandboxConfig: p.cfg})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}
