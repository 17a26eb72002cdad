//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

type podFixture struct {
	t      *testing.T
	rs     runtimeapi.RuntimeServiceClient
	id     string
	cfg    *runtimeapi.PodSandboxConfig
	logDir string
}

func newPod(t *testing.T, rs runtimeapi.RuntimeServiceClient, name string) *podFixture {
	return newPodOf(t, rs, podConfig(name))
}

// newPodOf runs a pod of cfg, with a log directory of the test's.
func newPodOf(t *testing.T, rs runtimeapi.RuntimeServiceClient, cfg *runtimeapi.PodSandboxConfig) *podFixture {
	cfg.LogDirectory = t.TempDir()
	return &podFixture{t: t, rs: rs, id: runPod(t, rs, cfg), cfg: cfg, logDir: cfg.LogDirectory}
}

// container is a busybox container config; in a pod that shares its PID namespace
// it shares it too (no namespace options, the CRI's zero value), else it asks for
// suiteNS.
func (p *podFixture) container(name string, cmd ...string) *runtimeapi.ContainerConfig {
	ns := suiteNS()
	if p.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_POD {
		ns = nil
	}
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:  cmd,
		LogPath:  name + ".log",
		Labels:   map[string]string{"c": name},
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}},
	}
}

func (p *podFixture) create(cfg *runtimeapi.ContainerConfig) string {
	p.t.Helper()
	resp, err := p.rs.CreateContainer(ctxT(p.t, time.Minute), &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
	require.NoError(p.t, err)
	return resp.ContainerId
}

func (p *podFixture) start(id string) {
	p.t.Helper()
	_, err := p.rs.StartContainer(ctxT(p.t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
	require.NoError(p.t, err)
}

func (p *podFixture) run(cfg *runtimeapi.ContainerConfig) string {
	id := p.create(cfg)
	p.start(id)
	return id
}

func containerStatus(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := rs.ContainerStatus(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	require.NoError(t, err)
	return resp.Status
}

func waitExited(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := containerStatus(t, rs, id)
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st
		}
		require.True(t, time.Now().Before(deadline), "container %s did not exit (state %s)", id, st.State)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits until the container's log holds want.
func waitLog(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), want) {
			return string(data)
		}
		require.True(t, time.Now().Before(deadline), "log %s never got %q; has:\n%s", path, want, data)
		time.Sleep(50 * time.Millisecond)
	}
}

func execSync(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, timeout int64, cmd ...string) (*runtimeapi.ExecSyncResponse, error) {
	return rs.ExecSync(ctxT(t, time.Minute), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: timeout},
		grpc.MaxCallRecvMsgSize(40<<20))
}

func TestContainerLifecycle(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "life")

	cfg := pod.container("main", "sh", "-c", "trap '' TERM; echo hello; echo oops >&2; while :; do sleep 1; done")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi there")}}
	id := pod.create(cfg)
	st := containerStatus(t, rs, id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, st.State)
	require.Equal(t, filepath.Join(pod.logDir, "main.log"), st.LogPath)

	pod.start(id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	log := waitLog(t, st.LogPath, "stderr F oops")
	require.Contains(t, log, " stdout F hello\n")

	out, err := execSync(t, rs, id, 0, "sh", "-c", "echo $GREETING; id -u")
	require.NoError(t, err)
	require.Equal(t, "hi there\n0\n", string(out.Stdout))
	out, err = execSync(t, rs, id, 0, "sh", "-c", "echo bad >&2; exit 3")
	require.NoError(t, err)
	require.Equal(t, int32(3), out.ExitCode)
	require.Equal(t, "bad\n", string(out.Stderr))

	list, err := rs.ListContainers(ctxT(t, 10*time.Second), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		PodSandboxId: pod.id, LabelSelector: map[string]string{"c": "main"}}})
	require.NoError(t, err)
	require.Len(t, list.Containers, 1)

	// The shell ignores SIGTERM: the grace period ends in SIGKILL.
	start := time.Now()
	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	st = containerStatus(t, rs, id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
	require.Equal(t, int32(137), st.ExitCode)
	require.Equal(t, "Error", st.Reason)
	require.NotZero(t, st.FinishedAt)

	_, err = execSync(t, rs, id, 0, "true")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	for i := 0; i < 2; i++ {
		_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id})
		require.NoError(t, err)
		_, err = rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: id})
		require.NoError(t, err)
	}
	_, err = rs.ContainerStatus(ctxT(t, time.Minute), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	require.Equal(t, codes.NotFound, status.Code(err))
	stopRemove(t, rs, pod.id)
}

func TestContainerExitCodesAndReasons(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPodOf(t, rs, pausePodConfig("exits")) // kill -9 $$ needs a shell that is not its namespace's PID 1
	tests := []struct {
		cmd    string
		code   int32
		reason string
	}{
		{"true", 0, "Completed"},
		{"exit 7", 7, "Error"},
		{"kill -9 $$", 137, "Error"},
	}
	for i, tt := range tests {
		id := pod.run(pod.container("exit"+string(rune('a'+i)), "sh", "-c", tt.cmd))
		st := waitExited(t, rs, id)
		require.Equal(t, tt.code, st.ExitCode, tt.cmd)
		require.Equal(t, tt.reason, st.Reason, tt.cmd)
		require.GreaterOrEqual(t, st.FinishedAt, st.StartedAt)
	}
	// A start error leaves the container EXITED with the reason.
	id := pod.create(pod.container("bad", "/no/such/binary"))
	_, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
	require.Error(t, err)
	st := containerStatus(t, rs, id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
	require.Equal(t, "StartError", st.Reason)

	// Unknown image: NotFound, never a pull; unknown pod: NotFound.
	cfg := pod.container("noimg", "true")
	cfg.Image.Image = "docker.io/library/nonexistent:1"
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: "nope", Config: pod.container("x", "true")})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	// Removing the pod removes its containers.
	stopRemove(t, rs, pod.id)
	list, err := rs.ListContainers(ctxT(t, 10*time.Second), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	require.Empty(t, list.Containers)
}

func TestExecSyncTimeoutCapAndBackgroundChild(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "exec")
	id := pod.run(pod.container("main", "sleep", "3600"))

	start := time.Now()
	_, err := execSync(t, rs, id, 1, "sleep", "61")
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	require.Less(t, time.Since(start), 20*time.Second)
	out, err := execSync(t, rs, id, 0, "sh", "-c", "ps | grep -c 'sleep 6[1]'")
	require.NoError(t, err)
	require.Equal(t, "0\n", string(out.Stdout), "the timed-out command was killed")

	start = time.Now()
	out, err = execSync(t, rs, id, 10, "sh", "-c", "sleep 30 & echo started")
	require.NoError(t, err)
	require.Equal(t, "started\n", string(out.Stdout))
	require.Less(t, time.Since(start), 10*time.Second, "a background child holding stdout must not hold ExecSync")

	// 20 MiB of output is capped at 16 MiB.
	out, err = execSync(t, rs, id, 60, "sh", "-c", "head -c 20971520 /dev/zero")
	require.NoError(t, err)
	require.Equal(t, 16<<20, len(out.Stdout))
	stopRemove(t, rs, pod.id)
}

func TestContainerLogsPartialLinesAndReopen(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "logs")
	id := pod.run(pod.container("main", "sh", "-c",
		"head -c 20000 /dev/zero | tr '\\0' a; echo; echo first; while sleep 0.2; do echo tick; done"))
	path := containerStatus(t, rs, id).LogPath
	log := waitLog(t, path, "stdout F first")
	require.Contains(t, log, " stdout P "+strings.Repeat("a", 16384)+"\n")
	require.Contains(t, log, " stdout F "+strings.Repeat("a", 20000-16384)+"\n")
	// Output that ends without a newline is a partial line: the kubelet adds a
	// newline to an F line (a termination message from the log would be "DONE\n").
	nonl := pod.run(pod.container("nonl", "sh", "-c", "printf DONE"))
	waitLog(t, containerStatus(t, rs, nonl).LogPath, "stdout P DONE\n")

	require.NoError(t, os.Rename(path, path+".1"))
	_, err := rs.ReopenContainerLog(ctxT(t, time.Minute), &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	require.NoError(t, err)
	waitLog(t, path, "stdout F tick")

	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0})
	require.NoError(t, err)
	_, err = rs.ReopenContainerLog(ctxT(t, time.Minute), &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	require.Error(t, err, "a stopped container's log cannot be reopened")
	stopRemove(t, rs, pod.id)
}

func TestOOMKilled(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "oom")
	cfg := pod.container("hog", "sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
	id := pod.run(cfg)
	st := waitExited(t, rs, id)
	require.Equal(t, "OOMKilled", st.Reason)
	require.Equal(t, int32(137), st.ExitCode)
	stopRemove(t, rs, pod.id)
}

// An exec whose process the container's memory limit kills before it starts (six
// runc inits at once, each reading a 1 MiB argument, in a 6 MiB cgroup) is
// ResourceExhausted, not Unknown; the container keeps running and answers the next
// exec.
func TestExecOOMKilledAtStart(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "execoom")
	cfg := pod.container("small", "sleep", "100000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 6 << 20}
	id := pod.run(cfg)
	byCode := map[codes.Code]int{}
	for round := 0; round < 3 && byCode[codes.ResourceExhausted] == 0; round++ {
		errs := make([]error, 6)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = rs.ExecSync(ctxT(t, time.Minute), &runtimeapi.ExecSyncRequest{ContainerId: id,
					Cmd: []string{"echo", strings.Repeat("A", 1<<20)}, Timeout: 20})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			byCode[status.Code(err)]++
			if err != nil {
				require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
				require.Contains(t, err.Error(), "OOM killer")
			}
		}
	}
	t.Logf("answers: %v", byCode)
	require.NotZero(t, byCode[codes.ResourceExhausted], "no exec was OOM-killed: the test did not make the case")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	resp, err := rs.ExecSync(ctxT(t, time.Minute), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo", "ok"}, Timeout: 20})
	require.NoError(t, err)
	require.Equal(t, "ok\n", string(resp.Stdout))
	stopRemove(t, rs, pod.id)
}

// kill -9 of shimd with a running and an exited container: after the restart both
// keep their status, the running one still runs, logs and exec work.
func TestKill9ShimdWithContainers(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "survive")
	running := pod.run(pod.container("runner", "sh", "-c", "i=0; while true; do i=$((i+1)); echo line$i; sleep 0.1; done"))
	exited := pod.run(pod.container("quitter", "sh", "-c", "exit 4"))
	waitExited(t, rs, exited)
	before := containerStatus(t, rs, running)
	path := before.LogPath
	waitLog(t, path, "line3")

	rs = restartShimd(t, env)

	requireSurvivedRestart(t, rs, running, exited, before)
	data, _ := os.ReadFile(path)
	n := strings.Count(string(data), "line")
	waitLog(t, path, "line"+strconv.Itoa(n+5)+"\n")
	stopRemove(t, rs, pod.id)
}

// requireSurvivedRestart checks, after a restart of shimd, that the running container
// still runs since before.StartedAt and answers exec, and exited keeps exit code 4.
func requireSurvivedRestart(t *testing.T, rs runtimeapi.RuntimeServiceClient, running, exited string, before *runtimeapi.ContainerStatus) {
	t.Helper()
	st := containerStatus(t, rs, running)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.State)
	require.Equal(t, before.StartedAt, st.StartedAt)
	st = containerStatus(t, rs, exited)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
	require.Equal(t, int32(4), st.ExitCode)
	out, err := execSync(t, rs, running, 0, "echo", "still here")
	require.NoError(t, err)
	require.Equal(t, "still here\n", string(out.Stdout))
}

// UpdateContainerResources changes a running container's cgroup limits, and
// ContainerStatus reports the new limits, also after shimd is killed and restarted
// (the kubelet checks them to see an in-place resize through).
func TestUpdateContainerResourcesSurvivesRestart(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "resize")
	cfg := pod.container("app", "sleep", "3600")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 128 << 20,
	}}
	id := pod.run(cfg)
	want := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 256, MemoryLimitInBytes: 64 << 20}
	_, err := rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: want})
	require.NoError(t, err)

	check := func(when string) {
		// The cgroup inside the container (v1 here; v2 where the host has it).
		out, err := execSync(t, rs, id, 10, "sh", "-c",
			"cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.shares 2>/dev/null || "+
				"cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max")
		require.NoError(t, err, when)
		got := strings.Fields(string(out.Stdout))
		if len(got) == 3 && got[0] == strconv.Itoa(64<<20) {
			require.Equal(t, []string{strconv.Itoa(64 << 20), "20000", "256"}, got, when)
		} else {
			require.Equal(t, []string{strconv.Itoa(64 << 20), "20000", "100000"}, got, when)
		}
		res := containerStatus(t, rs, id).GetResources().GetLinux()
		require.NotNil(t, res, when)
		require.Equal(t, want.MemoryLimitInBytes, res.MemoryLimitInBytes, when)
		require.Equal(t, want.CpuQuota, res.CpuQuota, when)
		require.Equal(t, want.CpuShares, res.CpuShares, when)
	}
	check("after the update")

	rs = restartShimd(t, env)
	check("after kill -9 and restart")
	stopRemove(t, rs, pod.id)
}
