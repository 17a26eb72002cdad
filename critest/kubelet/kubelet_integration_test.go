//go:build integration

package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// Pod names (without the node suffix) of the static pods TestKubelet runs.
var testPods = []string{"share", "probe", "web", "logger"}

// e2e is what the steps of TestKubelet share.
type e2e struct {
	env      *harness.Env
	k        *Kubelet
	rt       runtimeapi.RuntimeServiceClient
	hostPort int
	pods     []string // the static pods of this run
}

// TestKubelet runs a standalone kubelet (Version) on shimd and checks static
// pods through the kubelet's API and through CRI, step by step. The steps
// share one kubelet and one shimd; each waits with a deadline.
func TestKubelet(t *testing.T) { runKubelet(t, nil) }

// TestKubeletBetaFeatures runs the same steps with feature gates the kubelet has
// off by default, or had in v1.34: the evented PLEG (alpha, off in v1.37), which
// learns of container changes from GetContainerEvents instead of relisting, and
// image volumes (GA and always on since v1.36), with one more pod. Pod share's init
// container guards shimd's default evented_pleg_status = false: with a pod status
// timestamp, kubelet v1.37.2 reruns it forever (docs/operating.md).
func TestKubeletBetaFeatures(t *testing.T) {
	s := runKubelet(t, map[string]bool{"EventedPLEG": true, "ImageVolume": true})
	if s == nil || t.Failed() {
		return
	}
	// The kubelet subscribed, and dropped no event for want of the pod's status.
	shimdLog, err := os.ReadFile(s.env.Shimd.LogPath())
	if err != nil || !strings.Contains(string(shimdLog), "event subscriber connected") {
		harness.Errorf(t, "the kubelet never subscribed to GetContainerEvents (%v)", err)
	}
	klog, err := os.ReadFile(s.k.LogPath)
	if err != nil || strings.Contains(string(klog), "Evented PLEG: received ContainerEventResponse with nil") {
		harness.Errorf(t, "the kubelet dropped events (%v): %s", err, s.k.LogTail(20, "E"))
	}
}

// TestKubeletStatsFromCRI runs the same steps with the kubelet's
// PodAndContainerStatsFromCRI on: /stats/summary comes from the CRI stats RPCs and
// /metrics/cadvisor from ListMetricDescriptors and ListPodSandboxMetrics.
func TestKubeletStatsFromCRI(t *testing.T) {
	runKubelet(t, map[string]bool{"PodAndContainerStatsFromCRI": true})
}

func runKubelet(t *testing.T, gates map[string]bool) *e2e {
	s := startE2E(t, gates)
	if s == nil {
		return nil
	}
	s.pods = append([]string(nil), testPods...)
	s.hostPort = FreePort(t)
	for _, p := range []*corev1.Pod{sharePod(), probePod(), webPod(s.hostPort), loggerPod()} {
		s.k.WritePod(t, p)
	}
	if gates["ImageVolume"] {
		s.pods = append(s.pods, "imgvol")
		s.k.WritePod(t, imageVolumePod())
	}

	t.Run("1_init_and_shared_emptyDir", s.stepShare)
	if gates["ImageVolume"] {
		t.Run("1b_image_volume", s.stepImageVolume)
	}
	t.Run("2_liveness_restart_and_readiness", s.stepProbes)
	t.Run("3_hostPort", s.stepHostPort)
	t.Run("4_logs_and_rotation", s.stepLogs)
	t.Run("5_exec_and_portforward", s.stepStreaming)
	t.Run("5b_stats_summary", s.stepStats)
	if gates["PodAndContainerStatsFromCRI"] {
		t.Run("5c_metrics_cadvisor", s.stepCadvisorMetrics)
	}
	t.Run("6_kill9_shimd_and_restart_kubelet", s.stepRestart)
	t.Run("7_remove_manifests_teardown", s.stepTeardown)
	return s
}

// startE2E starts the registry, containerd, shimd and a kubelet with gates, with
// no pods; it skips the test (and returns nil) without root or a kubelet binary.
func startE2E(t *testing.T, gates map[string]bool) *e2e { return startE2EWith(t, gates, nil) }

// startE2EWith is startE2E with the kubelet's options changed by opt first.
func startE2EWith(t *testing.T, gates map[string]bool, opt func(*Options)) *e2e {
	return startE2EShimd(t, gates, "", opt)
}

// startE2EShimd is startE2EWith with shimdConfig (TOML keys) added to shimd's config;
// its [registry] table, if any, gets the test registry's config_path too.
func startE2EShimd(t *testing.T, gates map[string]bool, shimdConfig string, opt func(*Options)) *e2e {
	if os.Geteuid() != 0 {
		t.Skip("the kubelet e2e test needs root")
		return nil
	}
	if _, err := os.Stat(Binary()); err != nil {
		// "make integration" runs every package; "make e2e-kubelet" builds it first.
		t.Skipf("no kubelet at %s: build it with hack/tools.sh kubelet (make e2e-kubelet)", Binary())
		return nil
	}
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := filepath.Join(harness.NewBaseDir(t), "hosts")
	reg.WriteHermeticHostsDir(t, hosts) // a missing image never falls through to the real registry
	// The registry keys shimdConfig has go into the one [registry] table.
	registry := fmt.Sprintf("config_path = %q\n", hosts)
	if strings.Contains(shimdConfig, "[registry]\n") {
		shimdConfig = strings.Replace(shimdConfig, "[registry]\n", "[registry]\n"+registry, 1)
	} else {
		shimdConfig += "[registry]\n" + registry
	}
	env := harness.New(t, harness.Options{
		Shimd:       harness.ShimdOptions{ExtraConfig: shimdConfig},
		LeakTimeout: time.Minute,
	})
	s := &e2e{env: env, rt: env.Shimd.Runtime(t)}

	start := time.Now()
	opts := Options{Dir: harness.NewBaseDir(t), RuntimeEndpoint: env.Shimd.Endpoint(), NodeName: "shimd-e2e-node", FeatureGates: gates}
	if opt != nil {
		opt(&opts)
	}
	s.k = Start(t, opts)
	t.Logf("kubelet %s pid %d up in %s: API %s, read-only :%d, root %s, log %s",
		Version(), s.k.PID(), time.Since(start).Round(time.Millisecond), s.k.URL(), s.k.ReadOnly, s.k.RootDir, s.k.LogPath)
	// On failure: stop the kubelet first so it recreates nothing, then take
	// down through CRI whatever pods it left, so that netns, leases and
	// cgroups go too (the failed step has said what went wrong; the
	// harness's leak check runs after this on what remains).
	t.Cleanup(func() {
		if t.Failed() {
			s.k.Stop()
			s.forceRemovePods(t)
		}
	})
	return s
}

// Step 1b: the kubelet pulls the image of an image volume and shimd mounts it,
// whole and one directory of it (subPath), read-only.
func (s *e2e) stepImageVolume(t *testing.T) {
	Eventually(t, 3*time.Minute, "imgvol's log shows the image's files, read-only", func() error {
		out, err := s.k.ContainerLogs("imgvol", "reader", LogOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(out, imageVolumeOutput) {
			return fmt.Errorf("log %q", out)
		}
		return nil
	})
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Step 1: the init container ran first and exited 0; its file in the
// emptyDir is read by "reader", which also sees what "writer" wrote.
func (s *e2e) stepShare(t *testing.T) {
	var pod *corev1.Pod
	took := Eventually(t, 3*time.Minute, "pod share runs (init done, writer and reader running)", func() error {
		p, err := s.k.Pod("share")
		if err != nil {
			return err
		}
		pod = p
		init := containerStatus(p, "init")
		if init == nil || init.State.Terminated == nil {
			return fmt.Errorf("init container not terminated: %+v", init)
		}
		if init.State.Terminated.ExitCode != 0 {
			return fmt.Errorf("init container: %s", stateString(init.State))
		}
		return running(p, false, "writer", "reader")
	})
	t.Logf("pod share running after %s, pod IP %s", took, pod.Status.PodIP)

	want := initOutput + "\n" + writerOutput + "\nreader-done\n"
	Eventually(t, time.Minute, "reader's /containerLogs", func() error {
		out, err := s.k.ContainerLogs("share", "reader", LogOptions{})
		if err != nil {
			return err
		}
		if out != want {
			return fmt.Errorf("got %q, want %q", out, want)
		}
		return nil
	})
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !s.env.CNI.Subnet.Contains(ip) {
		harness.Errorf(t, "pod IP %q is not in the CNI subnet %s", pod.Status.PodIP, s.env.CNI.Subnet)
	}
	if podCondition(pod, corev1.PodInitialized) != corev1.ConditionTrue {
		harness.Errorf(t, "pod share: Initialized condition is %q", podCondition(pod, corev1.PodInitialized))
	}

	// Through CRI: one ready sandbox with the same IP; three containers
	// whose ids are the kubelet's.
	sb := s.sandbox(t, "share")
	st, err := s.rt.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id})
	if err != nil {
		harness.Fatalf(t, "PodSandboxStatus: %v", err)
	}
	if got := st.GetStatus().GetNetwork().GetIp(); got != pod.Status.PodIP {
		harness.Errorf(t, "CRI sandbox IP %q, kubelet pod IP %q", got, pod.Status.PodIP)
	}
	ctrs := s.containers(t, sb.Id)
	wantState := map[string]runtimeapi.ContainerState{
		"init": runtimeapi.ContainerState_CONTAINER_EXITED, "writer": runtimeapi.ContainerState_CONTAINER_RUNNING,
		"reader": runtimeapi.ContainerState_CONTAINER_RUNNING,
	}
	for _, c := range ctrs {
		name := c.GetMetadata().GetName()
		if ws, ok := wantState[name]; !ok || c.State != ws {
			harness.Errorf(t, "CRI container %s (%s) is %s, want %s", name, c.Id, c.State, ws)
		}
		if cs := containerStatus(pod, name); cs == nil || criID(cs.ContainerID) != c.Id {
			harness.Errorf(t, "CRI container %s id %s is not the kubelet's (%+v)", name, c.Id, cs)
		}
		delete(wantState, name)
	}
	if len(wantState) > 0 {
		harness.Errorf(t, "CRI lacks containers %v of pod share", wantState)
	}

	// The kubelet's pod cgroup (cgroupfs driver, BestEffort QoS) holds the
	// sandbox's and the running containers' cgroups, named by their ids.
	// A pause-less pod (shimd's default, when-needed: the pod shares no PID
	// namespace) has no sandbox cgroup, only the kubelet's pod cgroup with the
	// containers'.
	podCgroup := filepath.Join("/sys/fs/cgroup/memory/kubepods/besteffort", "pod"+string(pod.UID))
	ids := []string{criID(containerStatus(pod, "writer").ContainerID), criID(containerStatus(pod, "reader").ContainerID)}
	pauseless := s.pauseless(t, sb.Id)
	if want := s.env.Shimd.Pause() != "always"; pauseless != want {
		harness.Errorf(t, "pod share runs pause-less: %v, want %v (sandbox.pause %q)", pauseless, want, s.env.Shimd.Pause())
	}
	if pauseless {
		if _, err := os.Stat(filepath.Join(podCgroup, sb.Id)); !os.IsNotExist(err) {
			harness.Errorf(t, "pause-less pod %s has a sandbox cgroup (%v)", sb.Id, err)
		}
	} else {
		ids = append(ids, sb.Id)
	}
	for _, id := range ids {
		procs, err := os.ReadFile(filepath.Join(podCgroup, id, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(procs))) == 0 {
			harness.Errorf(t, "cgroup %s/%s holds no process (%v): shimd must honour the kubelet's cgroup parent", podCgroup, id, err)
		}
	}
}

// Step 5b: /stats/summary reports the pod and its containers with CPU and
// memory (cAdvisor, from the cgroups shimd made) and rootfs and logs (CRI).
func (s *e2e) stepStats(t *testing.T) {
	var last *PodStats
	Eventually(t, 90*time.Second, "pod share in /stats/summary with container CPU, memory, rootfs and logs", func() error {
		sum, err := s.k.StatsSummary()
		if err != nil {
			return err
		}
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.Name == s.k.MirrorName("share") {
				last = &sum.Pods[i]
			}
		}
		if last == nil {
			return fmt.Errorf("pod not in the summary (%d pods)", len(sum.Pods))
		}
		var missing []string
		for _, name := range []string{"writer", "reader"} {
			var cs *ContainerStats
			for i := range last.Containers {
				if last.Containers[i].Name == name {
					cs = &last.Containers[i]
				}
			}
			switch {
			case cs == nil:
				missing = append(missing, name)
				continue
			case cs.CPU == nil || cs.CPU.UsageCoreNanoSeconds == nil:
				missing = append(missing, name+".cpu")
			}
			if cs.Memory == nil || cs.Memory.WorkingSetBytes == nil {
				missing = append(missing, name+".memory")
			}
			if cs.Rootfs == nil || cs.Rootfs.UsedBytes == nil {
				missing = append(missing, name+".rootfs")
			}
			if cs.Logs == nil || cs.Logs.UsedBytes == nil {
				missing = append(missing, name+".logs")
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing %v", missing)
		}
		return nil
	})
	if last.Network == nil || len(last.Network.Interfaces) == 0 {
		t.Logf("note: no pod network stats in the summary")
	}
}

// Step 5c (PodAndContainerStatsFromCRI): the kubelet's /metrics/cadvisor shows pod
// share's containers' CPU and memory and the pod's network, from shimd's CRI
// metrics.
func (s *e2e) stepCadvisorMetrics(t *testing.T) {
	pod := fmt.Sprintf("pod=%q", s.k.MirrorName("share"))
	want := []struct {
		name     string
		labels   []string
		positive bool // CPU seconds of an idle container are a whole 0
	}{
		{"container_cpu_usage_seconds_total", []string{pod, `container="writer"`}, false},
		{"container_memory_working_set_bytes", []string{pod, `container="reader"`}, true},
		{"container_network_receive_bytes_total", []string{pod, `interface="eth0"`}, true},
		{"container_start_time_seconds", []string{pod, `container="writer"`}, true},
	}
	Eventually(t, 90*time.Second, "pod share in /metrics/cadvisor", func() error {
		body, err := s.k.Get("/metrics/cadvisor")
		if err != nil {
			return err
		}
		var missing []string
		for _, w := range want {
			if !hasSample(string(body), w.name, w.labels, w.positive) {
				missing = append(missing, w.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing %v", missing)
		}
		return nil
	})
}

// hasSample tells whether a Prometheus text exposition has a sample of name with
// all the given label pairs (and, if positive, a value above zero).
func hasSample(body, name string, labels []string, positive bool) bool {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		f := strings.Fields(line[strings.LastIndex(line, "}")+1:])
		if ok && len(f) > 0 && (!positive || f[0] != "0") {
			return true
		}
	}
	return false
}

// Step 2: the liveness probe fails on the first two starts: the kubelet
// kills and restarts the container, restartCount rises 0 -> 1 -> 2 and
// stays; the readiness probe then makes the pod Ready.
func (s *e2e) stepProbes(t *testing.T) {
	var seen []int32
	var pod *corev1.Pod
	took := Eventually(t, 4*time.Minute, "probe pod restarted twice by its liveness probe, then Ready", func() error {
		p, err := s.k.Pod("probe")
		if err != nil {
			return err
		}
		pod = p
		cs := containerStatus(p, "app")
		if cs == nil {
			return fmt.Errorf("no status for container app")
		}
		if len(seen) == 0 || seen[len(seen)-1] != cs.RestartCount {
			seen = append(seen, cs.RestartCount)
		}
		if cs.RestartCount > 2 {
			harness.Fatalf(t, "restartCount %d: the third start should have stayed healthy (seen %v)", cs.RestartCount, seen)
		}
		if cs.RestartCount < 2 {
			return fmt.Errorf("restartCount %d, state %s", cs.RestartCount, stateString(cs.State))
		}
		if err := running(p, true, "app"); err != nil {
			return err
		}
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("Ready condition is %q", podCondition(p, corev1.PodReady))
		}
		return nil
	})
	t.Logf("restartCount went %v; Ready after %s", seen, took)
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			harness.Errorf(t, "restartCount went down: %v", seen)
		}
	}
	cs := containerStatus(pod, "app")
	if lt := cs.LastTerminationState.Terminated; lt == nil {
		harness.Errorf(t, "no last termination state after a liveness restart")
	} else {
		t.Logf("last termination: exit %d, reason %s", lt.ExitCode, lt.Reason)
	}
	if out, err := s.k.ContainerLogs("probe", "app", LogOptions{}); err != nil || !strings.Contains(out, "start 3") {
		harness.Errorf(t, "current log of app: %q, %v; want \"start 3\"", out, err)
	}
	if out, err := s.k.ContainerLogs("probe", "app", LogOptions{Previous: true}); err != nil ||
		!strings.Contains(out, "start 2") || !strings.Contains(out, "unhealthy now") {
		harness.Errorf(t, "previous log of app: %q, %v; want \"start 2\" and \"unhealthy now\"", out, err)
	}
	// Through CRI: the running container is attempt 2 and the kubelet's.
	var runningIDs []string
	for _, c := range s.containers(t, s.sandbox(t, "probe").Id) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			runningIDs = append(runningIDs, c.Id)
			if c.GetMetadata().GetAttempt() != 2 {
				harness.Errorf(t, "CRI running container %s has attempt %d, want 2", c.Id, c.GetMetadata().GetAttempt())
			}
		}
	}
	if len(runningIDs) != 1 || runningIDs[0] != criID(cs.ContainerID) {
		harness.Errorf(t, "CRI running containers %v, kubelet's %s", runningIDs, cs.ContainerID)
	}
}

// Step 3: the nginx stand-in answers on 127.0.0.1:hostPort (portmap DNAT).
func (s *e2e) stepHostPort(t *testing.T) {
	took := Eventually(t, 3*time.Minute, "web pod running and ready (HTTP readiness probe)", func() error {
		p, err := s.k.Pod("web")
		if err != nil {
			return err
		}
		return running(p, true, "web")
	})
	t.Logf("web ready after %s", took)
	u := fmt.Sprintf("http://127.0.0.1:%d/", s.hostPort)
	Eventually(t, time.Minute, "GET "+u, func() error {
		code, _, err := httpGet(context.Background(), u)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("status %d", code)
		}
		return nil
	})
}
