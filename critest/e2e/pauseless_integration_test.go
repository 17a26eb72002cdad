//go:build integration

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Pause-less pods (sandbox.pause = "when-needed"): what a pod has must work without
// its pause process.

func pauselessEnv(t *testing.T) (*harness.Env, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Pause: "when-needed"}})
	pull(t, env, busyboxImage)
	return env, env.Shimd.Runtime(t)
}

// ownPID makes a pod or container config use a PID namespace of its own per
// container, as the kubelet asks unless the pod shares its process namespace (the
// CRI's zero value, POD, shares the pause process's).
func ownPID() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
}

// plPod runs a pod of podConfig(name) with ownPID; its containers use ownPID too.
func plPod(t *testing.T, rs runtimeapi.RuntimeServiceClient, cfg *runtimeapi.PodSandboxConfig) *podFixture {
	t.Helper()
	cfg.LogDirectory = t.TempDir()
	if cfg.Linux.SecurityContext.NamespaceOptions == nil {
		cfg.Linux.SecurityContext.NamespaceOptions = ownPID()
	}
	return &podFixture{t: t, rs: rs, id: runPod(t, rs, cfg), cfg: cfg, logDir: cfg.LogDirectory}
}

// plContainer is pod.container with ownPID.
func plContainer(pod *podFixture, name string, cmd ...string) *runtimeapi.ContainerConfig {
	c := pod.container(name, cmd...)
	c.Linux.SecurityContext.NamespaceOptions = ownPID()
	return c
}

// hasPauseTask tells whether containerd has a task for the pod's own id.
func hasPauseTask(t *testing.T, env *harness.Env, id string) bool {
	t.Helper()
	ctx := namespaces.WithNamespace(ctxT(t, 30*time.Second), env.Shimd.Namespace())
	c, err := env.Containerd.Client(t).LoadContainer(ctx, id)
	require.NoError(t, err, "the pod's record")
	_, err = c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// podInfo is the verbose PodSandboxStatus info.
func podInfo(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) map[string]any {
	t.Helper()
	resp, err := rs.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	require.NoError(t, err)
	var info map[string]any
	require.NoError(t, json.Unmarshal([]byte(resp.Info["info"]), &info))
	return info
}

// nsInode is the inode of a namespace file (pinned, or /proc/<pid>/ns/<x>).
func nsInode(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st), path)
	return fmt.Sprint(st.Ino)
}

func out(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, cmd ...string) string {
	t.Helper()
	resp, err := execSync(t, rs, id, 20, cmd...)
	require.NoError(t, err)
	require.Zero(t, resp.ExitCode, "%v: %s%s", cmd, resp.Stdout, resp.Stderr)
	return strings.TrimSpace(string(resp.Stdout))
}

// containerNS is the inode of a namespace of a running container, read in it.
func containerNS(t *testing.T, rs runtimeapi.RuntimeServiceClient, id, ns string) string {
	t.Helper()
	link := out(t, rs, id, "readlink", "/proc/self/ns/"+ns)
	return strings.TrimSuffix(strings.TrimPrefix(link, ns+":["), "]")
}

func TestPauselessPod(t *testing.T) {
	env, rs := pauselessEnv(t)
	cfg := podConfig("nopause")
	cfg.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_unprivileged_port_start": "81"}
	pod := plPod(t, rs, cfg)

	// No pause task; the namespaces are pinned.
	require.False(t, hasPauseTask(t, env, pod.id))
	info := podInfo(t, rs, pod.id)
	require.Equal(t, true, info["pauseless"])
	require.EqualValues(t, 0, info["pid"])
	logData, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.Regexp(t, `msg="sandbox ready".* mode=pause-less .*sandbox=`+pod.id, string(logData), "shimd's log says the pod's mode")
	pins := map[string]string{
		"net": filepath.Join(env.Shimd.StateDir(), "netns", pod.id),
		"ipc": filepath.Join(env.Shimd.StateDir(), "ipcns", pod.id),
		"uts": filepath.Join(env.Shimd.StateDir(), "utsns", pod.id),
	}
	require.Equal(t, pins["ipc"], info["ipcNamespacePath"])
	require.Equal(t, pins["uts"], info["utsNamespacePath"])
	st := podStatus(t, rs, pod.id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, st.State)
	requireInSubnet(t, env, st.Network.Ip)
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}), 1)

	// Two containers share the pinned namespaces, hostname, sysctls, /dev/shm and one shim.
	a := pod.run(plContainer(pod, "a", "sleep", "1000"))
	b := pod.run(plContainer(pod, "b", "sleep", "1000"))
	for _, id := range []string{a, b} {
		for ns, pin := range pins {
			require.Equal(t, nsInode(t, pin), containerNS(t, rs, id, ns), "%s namespace of %s", ns, id)
		}
		require.Equal(t, "nopause", out(t, rs, id, "hostname"))
		require.Equal(t, "1", out(t, rs, id, "cat", "/proc/sys/kernel/shm_rmid_forced"))
		require.Equal(t, "81", out(t, rs, id, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"))
		require.Equal(t, "search e2e.svc\nnameserver 198.18.255.53", out(t, rs, id, "cat", "/etc/resolv.conf"))
		require.Contains(t, out(t, rs, id, "ip", "-4", "addr", "show", "eth0"), st.Network.Ip+"/")
	}
	require.NotEqual(t, containerNS(t, rs, a, "pid"), containerNS(t, rs, b, "pid"), "each container has its own PID namespace")
	out(t, rs, a, "sh", "-c", "echo shared > /dev/shm/f")
	require.Equal(t, "shared", out(t, rs, b, "cat", "/dev/shm/f"))
	require.Contains(t, out(t, rs, b, "df", "-k", "/dev/shm"), "65536", "the pod's sized /dev/shm")
	require.Len(t, podShims(t, env), 1, "the pod's containers share one shim")

	// Stats: the containers' CPU and memory, the pod's network.
	stats, err := rs.PodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	require.Len(t, stats.Stats.Linux.Containers, 2)
	require.NotNil(t, stats.Stats.Linux.Memory)
	require.NotZero(t, stats.Stats.Linux.Memory.WorkingSetBytes.GetValue())
	require.NotNil(t, stats.Stats.Linux.Network)
	require.Equal(t, "eth0", stats.Stats.Linux.Network.DefaultInterface.Name)

	// Port forwarding reaches the pod's loopback through the pinned netns.
	waitServing(t, rs, pod.run(plContainer(pod, "web", httpd("the pause-less pod", 8080)...)), 8080)
	resp, err := rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id, Port: []int32{8080}})
	require.NoError(t, err)
	local := forward(t, "spdy", resp.Url, 8080)
	require.Equal(t, "hello from the pause-less pod\n", fetch(fmt.Sprintf("http://127.0.0.1:%d/index.html", local)))

	// kill -9 of shimd, then of containerd: the pod, its pins and containers are found again.
	rs = restartShimd(t, env)
	pod.rs = rs
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, pod.id).State)
	require.Equal(t, "nopause", out(t, rs, a, "hostname"))
	env.Containerd.Kill()
	env.Containerd.Restart(t)
	waitReady(t, rs)
	require.Eventually(t, func() bool {
		resp, err := execSync(t, rs, b, 10, "cat", "/dev/shm/f")
		return err == nil && string(resp.Stdout) == "shared\n"
	}, time.Minute, 200*time.Millisecond)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, pod.id).State)
	c := pod.run(plContainer(pod, "c", "sleep", "1000"))
	require.Equal(t, nsInode(t, pins["ipc"]), containerNS(t, rs, c, "ipc"))
	require.Len(t, podShims(t, env), 1, "a container made after the restarts joins the pod's shim")

	// The first container goes; the shim stays for the others, also across a restart.
	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: a, Timeout: 1})
	require.NoError(t, err)
	_, err = rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: a})
	require.NoError(t, err)
	rs = restartShimd(t, env)
	require.Equal(t, "nopause", out(t, rs, c, "hostname"))

	// Stop: NOTREADY, the pins go, and a restart keeps it NOTREADY; removal leaves nothing.
	_, err = rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, pod.id).State)
	for _, pin := range pins {
		require.NoFileExists(t, pin)
	}
	rs = restartShimd(t, env)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, pod.id).State)
	stopRemove(t, rs, pod.id)
	require.Empty(t, podShims(t, env))
	env.CheckNoLeaks(t)
}

// podShims lists the shim processes serving shimd's namespace in env.
func podShims(t *testing.T, env *harness.Env) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && strings.Contains(string(raw), "\x00"+env.Shimd.Namespace()+"\x00") &&
			strings.Contains(string(raw), env.Containerd.Address()) {
			if syscall.Kill(pid, 0) == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// A pause-less pod whose pinned namespace is gone is NOTREADY (the kubelet then makes
// the pod again); Stop and Remove still clean up all of it.
func TestPauselessPodNotReadyWhenPinGone(t *testing.T) {
	env, rs := pauselessEnv(t)
	pod := plPod(t, rs, podConfig("pinned"))
	pod.run(plContainer(pod, "a", "sleep", "1000"))
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, pod.id).State)
	require.NoError(t, unix.Unmount(filepath.Join(env.Shimd.StateDir(), "ipcns", pod.id), unix.MNT_DETACH))
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, pod.id).State)
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}), 1)
	_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.id, Config: plContainer(pod, "late", "sleep", "1"), SandboxConfig: pod.cfg})
	require.Error(t, err, "no container is created in a NOTREADY pod")
	// Still NOTREADY after a restart of shimd.
	rs = restartShimd(t, env)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, pod.id).State)
	for _, c := range listContainers(t, rs) {
		_, err := rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 1})
		require.NoError(t, err)
	}
	stopRemove(t, rs, pod.id)
	env.CheckNoLeaks(t)
}

func listContainers(t *testing.T, rs runtimeapi.RuntimeServiceClient) []*runtimeapi.Container {
	t.Helper()
	resp, err := rs.ListContainers(ctxT(t, 30*time.Second), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	return resp.Containers
}

// In "when-needed" mode a pod still gets its pause container when something needs
// it: a PID namespace shared by its containers, its own user namespace. A host
// network pod gets none and keeps the node's network and UTS namespaces.
func TestPauselessModeKeepsPauseWhenNeeded(t *testing.T) {
	env, rs := pauselessEnv(t)

	shared := podConfig("sharedpid")
	shared.LogDirectory = t.TempDir()
	shared.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}
	sp := &podFixture{t: t, rs: rs, id: runPod(t, rs, shared), cfg: shared, logDir: shared.LogDirectory}
	require.True(t, hasPauseTask(t, env, sp.id), "a shared PID namespace needs the pause process as its init")
	require.NotEqual(t, true, podInfo(t, rs, sp.id)["pauseless"])
	c := sp.container("a", "sleep", "1000")
	c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}
	id := sp.run(c)
	require.Contains(t, out(t, rs, id, "cat", "/proc/1/cmdline"), "pause", "the pause process is PID 1 of the pod")
	stopRemove(t, rs, sp.id)

	host := podConfig("hostnet")
	host.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER}
	hp := plPod(t, rs, host)
	require.False(t, hasPauseTask(t, env, hp.id))
	hid := hp.run(plContainer(hp, "a", "sleep", "1000"))
	nodeName, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, nodeName, out(t, rs, hid, "hostname"))
	require.Equal(t, nsInode(t, "/proc/self/ns/net"), containerNS(t, rs, hid, "net"))
	require.Equal(t, nsInode(t, filepath.Join(env.Shimd.StateDir(), "ipcns", hp.id)), containerNS(t, rs, hid, "ipc"))
	require.NoFileExists(t, filepath.Join(env.Shimd.StateDir(), "utsns", hp.id))
	_, err = rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: hp.id})
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(env.Shimd.StateDir(), "ipcns", hp.id), "Stop unpins the IPC namespace")
	stopRemove(t, rs, hp.id)

	if env.Containerd.MajorVersion() < 2 {
		t.Log("user namespaces: skipped, containerd 1.6 and runc 1.1 cannot run them")
	} else {
		userns := podConfig("userns")
		userns.LogDirectory = t.TempDir()
		ids := []*runtimeapi.IDMapping{{HostId: 200000, ContainerId: 0, Length: 65536}}
		userns.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER,
			UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}}
		up := &podFixture{t: t, rs: rs, id: runPod(t, rs, userns), cfg: userns, logDir: userns.LogDirectory}
		require.True(t, hasPauseTask(t, env, up.id), "a pod with its own user namespace keeps its pause container")
		uc := up.container("a", "sleep", "1000")
		uc.Linux.SecurityContext.NamespaceOptions = userns.Linux.SecurityContext.NamespaceOptions
		uid := up.run(uc)
		require.Equal(t, "0 200000 65536", strings.Join(strings.Fields(out(t, rs, uid, "cat", "/proc/self/uid_map")), " "))
		stopRemove(t, rs, up.id)
	}
	env.CheckNoLeaks(t)
}

// A runsc (gVisor) pod keeps its pause container in "when-needed" mode: the gVisor
// sandbox is made from it.
func TestPauselessModeRunscKeepsPause(t *testing.T) {
	requireRoot(t)
	harness.SkipWithoutRunsc(t)
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Pause: "when-needed", Runsc: true}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	cfg := podConfig("gvisor")
	cfg.Linux.SecurityContext.NamespaceOptions = ownPID()
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: harness.RunscHandler})
	require.NoError(t, err)
	require.True(t, hasPauseTask(t, env, resp.PodSandboxId))
	stopRemove(t, rs, resp.PodSandboxId)
	env.CheckNoLeaks(t)
}

// ListPodSandboxStats of a pause-less pod asks containerd for no task metrics (the
// pod has no task of its own, its container's cgroup is read directly), and its
// network counters are the pod's own: read from the container's /proc, they lie
// between what the container reads in its namespace before and after.
func TestPauselessPodStatsList(t *testing.T) {
	requireRoot(t)
	sock := filepath.Join(t.TempDir(), "debug.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Pause: "when-needed",
		ExtraConfig: fmt.Sprintf("[debug]\naddress = %q\n", sock)}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	debug := debugClient(sock)
	pod := plPod(t, rs, podConfig("plstats"))
	c := pod.run(plContainer(pod, "a", "sleep", "1000"))

	eth0 := func(netDev string) (rx, tx uint64) {
		for _, line := range strings.Split(netDev, "\n") {
			name, rest, ok := strings.Cut(line, ":")
			if !ok || strings.TrimSpace(name) != "eth0" {
				continue
			}
			f := strings.Fields(rest)
			require.GreaterOrEqual(t, len(f), 9, "%q", line)
			rx, _ = strconv.ParseUint(f[0], 10, 64)
			tx, _ = strconv.ParseUint(f[8], 10, 64)
			return rx, tx
		}
		t.Fatalf("no eth0 in %q", netDev)
		return 0, 0
	}
	rx0, tx0 := eth0(out(t, rs, c, "cat", "/proc/net/dev"))
	before := containerdCalls(t, debug)
	resp, err := rs.ListPodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.ListPodSandboxStatsRequest{})
	require.NoError(t, err)
	calls, _ := callDiff(before, containerdCalls(t, debug))
	rx1, tx1 := eth0(out(t, rs, c, "cat", "/proc/net/dev"))

	require.Len(t, resp.Stats, 1)
	st := resp.Stats[0].Linux
	require.Len(t, st.Containers, 1)
	require.NotZero(t, st.Memory.GetWorkingSetBytes().GetValue(), "the container's cgroup, read directly")
	require.NotContains(t, calls, "Metrics", "containerd's calls for the list: %s", calls)
	require.NotNil(t, st.Network)
	def := st.Network.DefaultInterface
	require.Equal(t, "eth0", def.Name)
	require.True(t, rx0 <= def.RxBytes.GetValue() && def.RxBytes.GetValue() <= rx1, "rx bytes %d, the container read %d then %d", def.RxBytes.GetValue(), rx0, rx1)
	require.True(t, tx0 <= def.TxBytes.GetValue() && def.TxBytes.GetValue() <= tx1, "tx bytes %d, the container read %d then %d", def.TxBytes.GetValue(), tx0, tx1)

	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: c, Timeout: 1})
	require.NoError(t, err)
	stopRemove(t, rs, pod.id)
	env.CheckNoLeaks(t)
}

// A container of a pause-less pod that exits while containerd is down, the last
// running task of its pod's shim, keeps its own exit code. containerd, when it starts
// again, takes such a shim for a leaked one and shuts it down with the exit event it
// had queued; shimd asks the pod's shim itself while containerd is away
// (container/exit_direct.go), so the exit shows before containerd is back. A second
// pod's container exits after containerd is back, through the events as usual.
func TestPauselessExitWhileContainerdDown(t *testing.T) {
	env, rs := pauselessEnv(t)
	ctl := t.TempDir()
	waiter := func(pod *podFixture, name string) *runtimeapi.ContainerConfig {
		c := plContainer(pod, name, "sh", "-c", "while [ ! -e /ctl/"+name+" ]; do sleep 0.1; done; exit 3")
		c.Mounts = []*runtimeapi.Mount{{HostPath: ctl, ContainerPath: "/ctl"}}
		return c
	}
	down := plPod(t, rs, podConfig("exitdown"))
	a := down.run(waiter(down, "a"))
	later := plPod(t, rs, podConfig("exitlater"))
	b := later.run(waiter(later, "b"))

	env.Containerd.Kill()
	require.NoError(t, os.WriteFile(filepath.Join(ctl, "a"), nil, 0o644))
	// a exits while containerd is down. Only its shim knows, and shimd asks it: the
	// exit shows before containerd is back (task API v3 on 2.x shims, v2 on 1.6's).
	require.Eventually(t, func() bool {
		st := containerStatus(t, rs, a)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 3
	}, 30*time.Second, 100*time.Millisecond, "a's exit, told by its shim while containerd is down")
	env.Containerd.Restart(t)
	waitRuntimeReady(t, rs) // shimd reaches containerd again, as the kubelet waits for
	require.NoError(t, os.WriteFile(filepath.Join(ctl, "b"), nil, 0o644))

	for _, id := range []string{a, b} {
		exitsWithError(t, rs, id, 3)
	}
	for _, p := range []*podFixture{down, later} {
		stopRemove(t, rs, p.id)
	}
	env.CheckNoLeaks(t)
}

// exitsWithError waits for container id to exit and checks its exit code and
// reason.
func exitsWithError(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, code int32) {
	t.Helper()
	st := waitExited(t, rs, id)
	assert.Equal(t, code, st.ExitCode, "exit code of %s (%s)", id, st.Reason)
	assert.Equal(t, "Error", st.Reason, "reason of %s", id)
}

// Containers that exit while shimd and containerd are both down keep their exit
// codes: one of a pause-less pod (its shim has no process left) and one of a pod
// with a pause (its shim runs on). containerd, when it starts again, would delete
// such a stopped task as a leaked shim's and shimd, still down, would miss the exit
// event of that delete; shimd records each container in containerd's sandbox store
// (container/exit_keep.go) so that containerd keeps the task and its exit status
// until shimd deletes it.
func TestExitWhileShimdAndContainerdDown(t *testing.T) {
	env, rs := pauselessEnv(t)
	ctl := t.TempDir()
	waiter := func(pod *podFixture, name string, code int) *runtimeapi.ContainerConfig {
		c := pod.container(name, "sh", "-c", fmt.Sprintf("while [ ! -e /ctl/%s ]; do sleep 0.1; done; exit %d", name, code))
		c.Mounts = []*runtimeapi.Mount{{HostPath: ctl, ContainerPath: "/ctl"}}
		return c
	}
	pl := plPod(t, rs, podConfig("bothdown-pl"))
	require.False(t, hasPauseTask(t, env, pl.id), "pause-less pod")
	a := pl.run(waiter(pl, "a", 3))
	pp := newPodOf(t, rs, pausePodConfig("bothdown-pause"))
	require.True(t, hasPauseTask(t, env, pp.id), "pod with a pause")
	b := pp.run(waiter(pp, "b", 4))
	pids := map[string]int{}
	for _, id := range []string{a, b} {
		resp, err := rs.ContainerStatus(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
		require.NoError(t, err)
		var info struct{ Pid int }
		require.NoError(t, json.Unmarshal([]byte(resp.Info["info"]), &info))
		require.NotZero(t, info.Pid, "pid of %s", id)
		pids[id] = info.Pid
	}

	env.Shimd.Kill9()
	env.Containerd.Kill()
	for _, name := range []string{"a", "b"} {
		require.NoError(t, os.WriteFile(filepath.Join(ctl, name), nil, 0o644))
	}
	for id, pid := range pids { // reaped by their shims
		require.Eventually(t, func() bool {
			return unix.Kill(pid, 0) == unix.ESRCH
		}, 30*time.Second, 50*time.Millisecond, "process %d of %s exits", pid, id)
	}
	env.Containerd.Restart(t)
	// containerd has loaded its shims when it answers. Any exit event a shim sends
	// it now has no subscriber: the shims try for up to 15 s, so shimd comes back
	// after that, with nothing but containerd's tasks to learn the exits from.
	time.Sleep(16 * time.Second)
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	waitRuntimeReady(t, rs)

	exitsWithError(t, rs, a, 3)
	exitsWithError(t, rs, b, 4)
	for _, p := range []*podFixture{pl, pp} {
		stopRemove(t, rs, p.id)
	}
	env.CheckNoLeaks(t)
}

// Recovery mends the containers' records in containerd's sandbox store: a container
// without one (made by a shimd that kept none) gets it, and the record of a container
// that is gone (a create or remove cut short) is removed.
func TestContainerStoreRecordsRecovered(t *testing.T) {
	env, rs := pauselessEnv(t)
	if env.Containerd.MajorVersion() < 2 {
		t.Skip("containerd 1.6 has no sandbox store")
	}
	pl := plPod(t, rs, podConfig("records"))
	a := pl.run(plContainer(pl, "a", "sleep", "3600"))
	ctx := namespaces.WithNamespace(ctxT(t, 30*time.Second), env.Shimd.Namespace())
	store := env.Containerd.Client(t).SandboxStore()
	rec, err := store.Get(ctx, a)
	require.NoError(t, err, "a's record")
	require.Equal(t, map[string]string{"io.shimd.kind": "container", "io.shimd.sandbox": pl.id}, rec.Labels)

	env.Shimd.Kill9()
	require.NoError(t, store.Delete(ctx, a))
	stray := rec
	stray.ID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	_, err = store.Create(ctx, stray)
	require.NoError(t, err)
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	waitReady(t, rs)

	_, err = store.Get(ctx, a)
	require.NoError(t, err, "a's record, written again by recovery")
	_, err = store.Get(ctx, stray.ID)
	require.True(t, errdefs.IsNotFound(err), "the record of a container shimd does not have: %v", err)
	stopRemove(t, rs, pl.id)
	_, err = store.Get(ctx, a)
	require.True(t, errdefs.IsNotFound(err), "a's record after its pod's removal: %v", err)
	env.CheckNoLeaks(t)
}

// A pause-less pod's containers share one shim that no pause keeps: the delete of
// the last exited task shuts it down, and a create that joined it must not go down
// with it (container/shim_gate.go). Without the gate this failed in 7 of 8 rounds,
// 2 to 12 of the 24 starts with "failed to create shim task: ttrpc: closed".
func TestPauselessStartsOfContainersThatExitAtOnce(t *testing.T) {
	env, rs := pauselessEnv(t)
	pod := plPod(t, rs, podConfig("plquickexit"))
	require.False(t, hasPauseTask(t, env, pod.id), "the pod runs without a pause")
	startQuickExits(t, rs, pod, func(name string, cmd ...string) *runtimeapi.ContainerConfig {
		return plContainer(pod, name, cmd...)
	})
	stopRemove(t, rs, pod.id)
}

// Containers of a pause-less pod started one after another, each exiting at once, as
// a pod's init containers run: most starts come while no task holds the pod's shim,
// some just as the delete of the last one shuts it down (each start follows the one
// before by 0 to 114 ms). Every start must make or find a live shim, and no shim may
// be left. containerd's task delete returns only after its connection to a shim it
// shut down closed and its clean-up ran (runtime/v2 shim.Delete). At 63647f5, 320
// starts of `true` 0 to 120 ms apart all succeeded; in the run of 80 whose logs were
// read, each made a new shim and none was made again.
func TestPauselessChainOfContainersThatExitAtOnce(t *testing.T) {
	env, rs := pauselessEnv(t)
	pod := plPod(t, rs, podConfig("plchain"))
	require.False(t, hasPauseTask(t, env, pod.id), "the pod runs without a pause")
	const n = 30
	ids := make([]string, n)
	for i := range ids {
		ids[i] = pod.create(plContainer(pod, fmt.Sprintf("c%d", i), "echo", "hello"))
	}
	for i, id := range ids {
		_, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
		require.NoError(t, err, "start c%d", i)
		time.Sleep(time.Duration(i*37%115) * time.Millisecond)
	}
	for i, id := range ids {
		st := waitExited(t, rs, id)
		require.Equal(t, int32(0), st.ExitCode, "c%d: %s %s", i, st.Reason, st.Message)
		require.Equal(t, "Completed", st.Reason, "c%d", i)
		waitLog(t, st.LogPath, " stdout F hello\n")
	}
	stopRemove(t, rs, pod.id)
	env.CheckNoLeaks(t)
}
