//go:build integration

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// nriPluginBinary builds critest/nriplugin once per test binary.
func nriPluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := harness.Build("./critest/nriplugin")
	require.NoError(t, err)
	return bin
}

type nriLogEntry struct {
	Event      string            `json:"event"`
	Pod        string            `json:"pod"`
	Container  string            `json:"container"`
	Pods       []string          `json:"pods"`
	Containers []string          `json:"containers"`
	Memory     int64             `json:"memory"`
	Labels     map[string]string `json:"labels"`
}

func readNRILog(t *testing.T, path string) []nriLogEntry {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []nriLogEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e nriLogEntry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		out = append(out, e)
	}
	return out
}

// waitNRILog waits until the plugin's log has an entry that ok accepts.
func waitNRILog(t *testing.T, path string, what string, ok func(nriLogEntry) bool) nriLogEntry {
	t.Helper()
	var found nriLogEntry
	require.Eventually(t, func() bool {
		for _, e := range readNRILog(t, path) {
			if ok(e) {
				found = e
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "plugin log %s never showed %s: %+v", path, what, readNRILog(t, path))
	return found
}

// startNRIPlugin runs the test plugin against shimd's NRI socket and waits until it
// has synchronized.
func startNRIPlugin(t *testing.T, env *harness.Env, name, idx string, cfg map[string]any) (*exec.Cmd, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	cfg["log"], cfg["name"] = logPath, name
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(nriPluginBinary(t), "-socket", env.Shimd.NRISocket(), "-name", name, "-idx", idx, "-config", string(data))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	waitNRILog(t, logPath, "Synchronize", func(e nriLogEntry) bool { return e.Event == "Synchronize" })
	return cmd, logPath
}

// eventsOf lists the events of the log about one pod, in order.
func eventsOf(entries []nriLogEntry, pod string) []string {
	var out []string
	for _, e := range entries {
		if e.Pod == pod {
			out = append(out, e.Event)
		}
	}
	return out
}

// NRI plugins connected to shimd's socket (the test plugin, written with the NRI
// library's stub): they see every pod and container event in order; the injector's
// adjustment (env, mount, device, a CDI device, annotation) reaches the container; its change of
// an UpdateContainerResources is applied, and so is its unsolicited update;
// UpdatePodSandboxResources reaches plugins.
func TestNRIPluginsSeeEventsAndAdjustContainers(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	data := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(data, "hello"), []byte("from nri\n"), 0o644))
	null := filepath.Join(t.TempDir(), "null")
	require.NoError(t, unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	_, logPath := startNRIPlugin(t, env, "logger", "10", map[string]any{})
	writeCDISpec(t, env.Shimd.CDISpecDir(), "nri.yaml",
		"cdiVersion: \"0.6.0\"\nkind: test.shimd.io/nri\ndevices:\n- name: dev\n  containerEdits:\n    env: [\"NRI_CDI=1\"]\n")
	startNRIPlugin(t, env, "inject", "20", map[string]any{"inject": true, "mount_source": data, "device_host": null, "cdi_device": "test.shimd.io/nri=dev"})

	p := newPod(t, rs, "nri")
	cfg := p.container("adjusted", "sleep", "3600")
	cfg.Annotations = map[string]string{"nri.test/inject": "yes", "nri.test/bump": "yes", "nri.test/update": "yes"}
	id := p.run(cfg)
	out, err := execSync(t, rs, id, 30, "sh", "-c",
		"echo env=$NRI_INJECTED cdi=$NRI_CDI; cat /nri-data/hello; test -c /dev/nri-null && echo x > /dev/nri-null && echo device-ok")
	require.NoError(t, err)
	require.Equal(t, "env=inject cdi=1\nfrom nri\ndevice-ok\n", string(out.Stdout), "stderr: %s", out.Stderr)

	// The unsolicited update the injector asks for once the container runs.
	require.Eventually(t, func() bool {
		return containerStatus(t, rs, id).GetResources().GetLinux().GetMemoryLimitInBytes() == 48<<20
	}, 30*time.Second, 100*time.Millisecond, "the plugin's unsolicited update was not applied: %+v", readNRILog(t, logPath))
	requireCgroupMemoryLimit(t, rs, id, 48<<20)

	// UpdateContainerResources: the injector adds 1 MiB.
	_, err = rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}})
	require.NoError(t, err)
	require.Equal(t, int64(65<<20), containerStatus(t, rs, id).GetResources().GetLinux().GetMemoryLimitInBytes())
	requireCgroupMemoryLimit(t, rs, id, 65<<20)
	_, err = rs.UpdatePodSandboxResources(ctxT(t, time.Minute), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: p.id, Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}})
	require.NoError(t, err)
	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
	require.NoError(t, err)
	_, err = rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: id})
	require.NoError(t, err)
	_, err = rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id})
	require.NoError(t, err)
	stopRemove(t, rs, p.id) // a second stop, which plugins do not hear of again

	waitNRILog(t, logPath, "RemovePodSandbox", func(e nriLogEntry) bool { return e.Event == "RemovePodSandbox" && e.Pod == p.id })
	entries := readNRILog(t, logPath)
	require.Equal(t, []string{
		"RunPodSandbox", "CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
		"UpdateContainer", "PostUpdateContainer", "UpdatePodSandbox", "StopContainer", "RemoveContainer",
		"StopPodSandbox", "RemovePodSandbox",
	}, eventsOf(entries, p.id))
	for _, e := range entries {
		switch {
		case e.Event == "UpdateContainer":
			require.Equal(t, int64(64<<20), e.Memory, "the plugins see what the kubelet asked for")
		case e.Event == "UpdatePodSandbox":
			require.Equal(t, int64(256<<20), e.Memory)
		case e.Container != "":
			require.Equal(t, id, e.Container)
		}
	}
}

// requireCgroupMemoryLimit reads the container's memory limit from its cgroup
// (v1 or v2) from inside it.
func requireCgroupMemoryLimit(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, want int64) {
	t.Helper()
	out, err := execSync(t, rs, id, 30, "sh", "-c",
		"cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(want), strings.TrimSpace(string(out.Stdout)), "stderr: %s", out.Stderr)
}

// A plugin that never answers and one that crashes delay a pod by at most the
// plugin request timeout (2s by default) and are dropped; the pod and its
// containers are made.
func TestNRIHangingAndCrashingPluginsDoNotBlockPods(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	crash, _ := startNRIPlugin(t, env, "crash", "10", map[string]any{"crash": true})
	hang, _ := startNRIPlugin(t, env, "hang", "20", map[string]any{"hang": true})

	start := time.Now()
	p := newPod(t, rs, "nri-stuck")
	took := time.Since(start)
	require.Less(t, took, 15*time.Second, "RunPodSandbox took %s", took)
	start = time.Now()
	id := p.run(p.container("after", "sleep", "3600"))
	require.Less(t, time.Since(start), 10*time.Second, "the hanging plugin was not dropped")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	for _, c := range []*exec.Cmd{crash, hang} {
		require.Eventually(t, func() bool {
			return c.Process.Signal(syscall.Signal(0)) != nil
		}, 10*time.Second, 50*time.Millisecond, "plugin %v still runs", c.Args)
	}
	stopRemove(t, rs, p.id)
}

// A plugin shimd starts from its plugin directory is synchronized with the pods and
// containers that exist, also after shimd is killed and started again (the old
// plugin process exits with its connection, a new one is started); shimd's
// shutdown stops it.
func TestNRIPluginResynchronizesAfterRestart(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	p := newPod(t, rs, "nri-resync")
	id := p.run(p.container("kept", "sleep", "3600"))

	logPath := filepath.Join(t.TempDir(), "launched.log")
	require.NoError(t, os.MkdirAll(env.Shimd.NRIPluginDir(), 0o755))
	bin, err := os.ReadFile(nriPluginBinary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(env.Shimd.NRIPluginDir(), "10-launched"), bin, 0o755))
	confDir := env.Shimd.NRIConfigDir()
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(confDir, "10-launched.conf"), []byte(fmt.Sprintf(`{"log": %q}`, logPath)), 0o644))

	syncs := func() []nriLogEntry {
		var out []nriLogEntry
		for _, e := range readNRILog(t, logPath) {
			if e.Event == "Synchronize" {
				out = append(out, e)
			}
		}
		return out
	}
	for round := 1; round <= 2; round++ {
		rs = restartShimd(t, env)
		require.Eventually(t, func() bool { return len(syncs()) == round }, 30*time.Second, 50*time.Millisecond,
			"round %d: %+v", round, readNRILog(t, logPath))
		last := syncs()[round-1]
		require.Equal(t, []string{p.id}, last.Pods, "round %d", round)
		require.Equal(t, []string{id}, last.Containers, "round %d", round)
		require.Eventually(t, func() bool { return len(pluginProcesses(t, "10-launched")) == 1 }, 10*time.Second, 50*time.Millisecond,
			"round %d: plugin processes %v", round, pluginProcesses(t, "10-launched"))
	}
	// The plugin hears of what happens after the restart.
	p.rs = rs
	stopRemove(t, rs, p.id)
	waitNRILog(t, logPath, "RemovePodSandbox", func(e nriLogEntry) bool { return e.Event == "RemovePodSandbox" && e.Pod == p.id })
	// shimd's shutdown stops the plugins it started.
	env.Shimd.Stop()
	require.Empty(t, pluginProcesses(t, "10-launched"), "a plugin outlived shimd")
}

// pluginProcesses lists the pids of processes whose executable is named name.
func pluginProcesses(t *testing.T, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == name {
			out = append(out, pid)
		}
	}
	return out
}
