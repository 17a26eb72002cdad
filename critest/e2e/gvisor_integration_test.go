//go:build integration

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// gVisor (runsc) as a runtime handler: every pod here runs with RuntimeHandler
// "runsc" on containerd-shim-runsc-v1 and runsc --platform=systrap from the tools
// directory (bash hack/tools.sh runsc); without them the tests are skipped. The
// environment's leak check (netns, IPAM lease, mounts, cgroups, containers, shims and
// runsc's sandbox and gofer processes) runs after each.

// gvisorEnv starts an environment with the runsc handler and pulls busybox.
func gvisorEnv(t *testing.T) (*harness.Env, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	requireRoot(t)
	harness.SkipWithoutRunsc(t)
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Runsc: true}})
	pull(t, env, busyboxImage)
	return env, env.Shimd.Runtime(t)
}

// gvisorPod runs a pod on runsc.
func gvisorPod(t *testing.T, rs runtimeapi.RuntimeServiceClient, name string) *podFixture {
	t.Helper()
	cfg := pausePodConfig(name) // one PID namespace for the pod's containers
	cfg.LogDirectory = t.TempDir()
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: harness.RunscHandler})
	require.NoError(t, err)
	return &podFixture{t: t, rs: rs, id: resp.PodSandboxId, cfg: cfg, logDir: cfg.LogDirectory}
}

// runscSandboxes lists the command lines of runsc's sandbox processes ("runsc-sandbox
// ... boot ... <id>") of the environment.
func runscSandboxes(t *testing.T, env *harness.Env) []string {
	t.Helper()
	out, err := exec.Command("ps", "-eo", "args").Output()
	require.NoError(t, err)
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "runsc-sandbox") && strings.Contains(l, env.Base) {
			found = append(found, l)
		}
	}
	return found
}

// A pod's containers run in its one gVisor sandbox (the pause container's), on
// gVisor's kernel, beside a runc pod on the host's.
func TestGVisorPodSharesOneSandbox(t *testing.T) {
	env, rs := gvisorEnv(t)
	pod := gvisorPod(t, rs, "gvisor-kernel")
	st := podStatus(t, rs, pod.id)
	require.Equal(t, harness.RunscHandler, st.RuntimeHandler)
	requireInSubnet(t, env, st.Network.Ip)
	a := pod.run(pod.container("a", "sleep", "100000"))
	b := pod.run(pod.container("b", "sleep", "100000"))

	resp, err := execSync(t, rs, a, 10, "dmesg")
	require.NoError(t, err)
	require.Equal(t, int32(0), resp.ExitCode, "stderr: %s", resp.Stderr)
	require.Contains(t, string(resp.Stdout), "Starting gVisor")
	// b sees a's process: one kernel, one pid namespace for the pod.
	resp, err = execSync(t, rs, b, 10, "ps", "-o", "pid,args")
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(resp.Stdout), "sleep 100000"), "ps in b:\n%s", resp.Stdout)
	require.Contains(t, string(resp.Stdout), "/pause")
	sandboxes := runscSandboxes(t, env)
	require.Len(t, sandboxes, 1, "one gVisor sandbox for the pod: %q", sandboxes)
	require.Contains(t, sandboxes[0], pod.id)

	// The runc pod beside it sees the host's kernel.
	runcPod := newPod(t, rs, "runc-beside")
	r := runcPod.run(runcPod.container("r", "sleep", "100000"))
	host, err := exec.Command("uname", "-r").Output()
	require.NoError(t, err)
	resp, err = execSync(t, rs, r, 10, "uname", "-r")
	require.NoError(t, err)
	require.Equal(t, string(host), string(resp.Stdout))
	resp, err = execSync(t, rs, a, 10, "uname", "-r")
	require.NoError(t, err)
	require.NotEqual(t, string(host), string(resp.Stdout), "gVisor reports its own kernel release")
	for name, id := range map[string]string{"gVisor pod": a, "runc pod": r} {
		resp, err = execSync(t, rs, id, 10, "sh", "-c", "uname -a; dmesg | head -3")
		require.NoError(t, err)
		t.Logf("%s: uname -a; dmesg | head -3:\n%s%s", name, resp.Stdout, resp.Stderr)
	}
	stopRemove(t, rs, runcPod.id)
	stopRemove(t, rs, pod.id)
	require.Empty(t, runscSandboxes(t, env), "the sandbox ends with the pod")
}

// Volumes, logs, ExecSync, streaming exec and attach in a gVisor pod.
func TestGVisorVolumesLogsExecAttach(t *testing.T) {
	_, rs := gvisorEnv(t)
	pod := gvisorPod(t, rs, "gvisor-io")
	vol := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(vol, "in"), []byte("from the host\n"), 0o644))
	cfg := pod.container("main", "sh", "-c", "cat /data/in; echo written > /data/out; echo to stderr >&2; exec sleep 100000")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: vol}}
	id := pod.run(cfg)
	path := containerStatus(t, rs, id).LogPath
	log := waitLog(t, path, "stderr F to stderr")
	require.Contains(t, log, " stdout F from the host\n")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(vol, "out"))
		return string(b) == "written\n"
	}, 10*time.Second, 50*time.Millisecond, "the container's write reaches the host")

	resp, err := execSync(t, rs, id, 10, "sh", "-c", "echo out; echo err >&2; exit 3")
	require.NoError(t, err)
	require.Equal(t, int32(3), resp.ExitCode)
	require.Equal(t, "out\n", string(resp.Stdout))
	require.Equal(t, "err\n", string(resp.Stderr))

	for _, proto := range protocols {
		u := execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
		var out bytes.Buffer
		require.NoError(t, executor(t, proto, u).StreamWithContext(ctxT(t, time.Minute),
			remotecommand.StreamOptions{Stdin: strings.NewReader("echo me\n"), Stdout: &out}), proto)
		require.Equal(t, "echo me\n", out.String(), proto)
	}

	// Attach: stdin of an interactive container reaches it, its output comes back.
	acfg := pod.container("attached", "sh", "-c", "while read l; do echo got $l; done")
	acfg.Stdin, acfg.StdinOnce = true, false
	aid := pod.run(acfg)
	u := attachURL(t, rs, &runtimeapi.AttachRequest{ContainerId: aid, Stdin: true, Stdout: true})
	var out syncBuffer
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- executor(t, "spdy", u).StreamWithContext(ctxT(t, time.Minute), remotecommand.StreamOptions{Stdin: pr, Stdout: &out})
	}()
	_, _ = pw.Write([]byte("hello\n"))
	waitOutput(t, &out, "got hello")
	pw.Close()
	<-done
	stopRemove(t, rs, pod.id)
}

// Stats in a gVisor pod, and an OOM kill. gVisor enforces memory at the sandbox:
// its Sentry runs in the pod's cgroup (the pause container's), and the runsc shim
// watches that cgroup for OOM kills. A container's own memory limit does not make
// the host kill anything; the pod's cgroup limit (the kubelet's pod cgroup, here a
// cgroup parent with a memory limit) does, and the container that ran out is
// reported OOMKilled.
func TestGVisorStatsAndOOM(t *testing.T) {
	_, rs := gvisorEnv(t)
	pod := gvisorPod(t, rs, "gvisor-stats")
	id := pod.run(pod.container("busy", "sh", "-c", "x=$(head -c 20000000 /dev/zero | tr '\\0' a); while :; do :; done"))
	require.Eventually(t, func() bool {
		resp, err := rs.ContainerStats(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		require.NoError(t, err)
		s := resp.Stats
		return s.Cpu.GetUsageCoreNanoSeconds().GetValue() > 0 && s.Memory.GetWorkingSetBytes().GetValue() > 0
	}, 30*time.Second, 500*time.Millisecond, "the container's CPU and memory are counted")
	ps, err := rs.PodSandboxStats(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	require.NotZero(t, ps.Stats.Linux.Cpu.GetUsageCoreNanoSeconds().GetValue())
	stopRemove(t, rs, pod.id)

	parent := memoryLimitedParent(t, 128<<20)
	cfg := podConfig("gvisor-oom")
	cfg.LogDirectory = t.TempDir()
	cfg.Linux.CgroupParent = parent
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: harness.RunscHandler})
	require.NoError(t, err)
	oomPod := &podFixture{t: t, rs: rs, id: resp.PodSandboxId, cfg: cfg, logDir: cfg.LogDirectory}
	hog := oomPod.run(oomPod.container("hog", "sh", "-c", "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived"))
	st := waitExitedWithin(t, rs, hog, 3*time.Minute)
	t.Logf("hog: exit %d, reason %q, message %q", st.ExitCode, st.Reason, st.Message)
	require.Equal(t, "OOMKilled", st.Reason)
	stopRemove(t, rs, oomPod.id)
}

// memoryLimitedParent makes a cgroup (v1: in every hierarchy, the memory one with
// limit bytes) for a pod's cgroup_parent, outside the environment's namespace, and
// removes it at the end.
func memoryLimitedParent(t *testing.T, limit int64) string {
	t.Helper()
	name := fmt.Sprintf("/shimd-e2e-oom-%d", os.Getpid())
	mem := filepath.Join("/sys/fs/cgroup/memory", name)
	require.NoError(t, os.MkdirAll(mem, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte(fmt.Sprint(limit)), 0o644))
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", name))
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	})
	return name
}

func waitExitedWithin(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, d time.Duration) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	require.Eventually(t, func() bool {
		st = containerStatus(t, rs, id)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	}, d, 200*time.Millisecond, "container %s did not exit", id)
	return st
}

// kill -9 of shimd with a gVisor pod: after the restart the pod and its containers
// are the same, exec works, and stop and remove leave nothing.
func TestGVisorKill9ShimdRecovers(t *testing.T) {
	env, rs := gvisorEnv(t)
	pod := gvisorPod(t, rs, "gvisor-survive")
	running := pod.run(pod.container("runner", "sh", "-c", "i=0; while true; do i=$((i+1)); echo line$i; sleep 0.1; done"))
	exited := pod.run(pod.container("quitter", "sh", "-c", "exit 4"))
	waitExited(t, rs, exited)
	before := containerStatus(t, rs, running)
	waitLog(t, before.LogPath, "line3")
	podBefore := podStatus(t, rs, pod.id)

	rs = restartShimd(t, env)

	podAfter := podStatus(t, rs, pod.id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podAfter.State)
	require.Equal(t, podBefore.Network.Ip, podAfter.Network.Ip)
	require.Equal(t, harness.RunscHandler, podAfter.RuntimeHandler)
	requireSurvivedRestart(t, rs, running, exited, before)
	// A container created after the restart joins the same sandbox.
	late := pod.run(pod.container("late", "sleep", "100000"))
	out, err := execSync(t, rs, late, 10, "ps", "-o", "args")
	require.NoError(t, err)
	require.Contains(t, string(out.Stdout), "echo line", "the new container sees the old one's processes")
	require.Len(t, runscSandboxes(t, env), 1)

	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: running, Timeout: 2})
	require.NoError(t, err)
	_, err = rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: running})
	require.NoError(t, err)
	stopRemove(t, rs, pod.id)
}

// Port forwarding reaches the gVisor pod's own loopback (its network stack lives in
// the sandbox: runsc port-forward), over both transports; a port nobody listens on
// fails that connection only.
func TestGVisorPortForward(t *testing.T) {
	_, rs := gvisorEnv(t)
	pod := gvisorPod(t, rs, "gvisor-pf")
	waitServing(t, rs, pod.run(pod.container("web", httpd("the gVisor pod", 8080)...)), 8080)
	for _, proto := range protocols {
		resp, err := rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id, Port: []int32{8080}})
		require.NoError(t, err)
		local := forward(t, proto, resp.Url, 8080)
		bodies := make(chan string, 3)
		for i := 0; i < 3; i++ {
			go func() { bodies <- fetch(fmt.Sprintf("http://127.0.0.1:%d/index.html", local)) }()
		}
		for i := 0; i < 3; i++ {
			require.Equal(t, "hello from the gVisor pod\n", <-bodies, proto)
		}
	}
	// Nothing listens on 8081: that connection fails (runsc reports the refused connect).
	resp, err := rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	local := forward(t, "spdy", resp.Url, 8081)
	require.NotEqual(t, "hello from the gVisor pod\n", fetch(fmt.Sprintf("http://127.0.0.1:%d/index.html", local)))
	stopRemove(t, rs, pod.id)
}

// Status reports the runsc handler with runsc's own features: no recursive
// read-only mounts (runsc does not list "rro").
func TestGVisorHandlerFeatures(t *testing.T) {
	_, rs := gvisorEnv(t)
	resp, err := rs.Status(ctxT(t, 30*time.Second), &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	var got *runtimeapi.RuntimeHandler
	for _, h := range resp.RuntimeHandlers {
		if h.Name == harness.RunscHandler {
			got = h
		}
	}
	require.NotNil(t, got, "handlers: %v", resp.RuntimeHandlers)
	require.False(t, got.Features.RecursiveReadOnlyMounts)
	feats, err := exec.Command(harness.Tools().Runsc, "features").Output()
	require.NoError(t, err)
	require.Equal(t, strings.Contains(string(feats), `"user"`) && strings.Contains(string(feats), `"idmap"`),
		got.Features.UserNamespaces, "user namespaces as runsc features says")
}
