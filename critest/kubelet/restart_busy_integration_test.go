//go:build integration

package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestKubeletRestartBusyShims is the CI scenario of issue 32, item 1: in one CI
// run with shimd's periodic sweep on (since removed: failed cleanups are retried
// one by one instead, package cleanup), every pod of the kubelet test died about
// 10 s after shimd's kill -9 and restart. Here the same steps run (the four pods,
// two probe-driven restarts, kill -9 of shimd, a kubelet restart), then 30 s more
// after every shim of the node but the probe pod's was stopped (SIGSTOP) for 3 s,
// as on a machine too busy for containerd to get the tasks' states in time: no pod
// may lose a container or restart one, and shimd must list the same sandboxes and
// containers.
func TestKubeletRestartBusyShims(t *testing.T) {
	s := startE2EShimd(t, nil, "", nil)
	if s == nil {
		return
	}
	s.pods = append([]string(nil), testPods...)
	s.hostPort = FreePort(t)
	for _, p := range []*corev1.Pod{sharePod(), probePod(), webPod(s.hostPort), loggerPod()} {
		s.k.WritePod(t, p)
	}
	t.Run("1_pods_run", s.stepShare)
	t.Run("2_liveness_restart_and_readiness", s.stepProbes)
	t.Run("3_kill9_shimd_and_restart_kubelet", s.stepRestart)
	t.Run("4_busy_shims", func(t *testing.T) {
		before := s.snapshot(t)
		all, _ := harness.ShimPIDs(s.env.Containerd.Address())
		shims := s.shimsBut(t, "probe")
		for _, pid := range shims {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		time.Sleep(3 * time.Second) // containerd waits 2 s for a task's state
		for _, pid := range shims {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		t.Logf("%d of the %d shims were stopped for 3 s", len(shims), len(all))
		Consistently(t, 30*time.Second, "pods keep the same containers and restart counts", func() error {
			return s.sameContainers(before)
		})
		s.compareCRI(t, before)
	})
	t.Run("5_kill9_shimd_while_shims_busy", s.stepRestartBusyShims)
	t.Run("6_remove_manifests_teardown", s.stepTeardown)
}

// stepRestartBusyShims kills shimd with -9 and starts it again while the shims
// (all but the probe pod's) are stopped, so that containerd can tell none of their
// tasks' states during shimd's recovery (it waits 2 s per task, then answers
// DeadlineExceeded); they go on once shimd serves. A recovery that took "no
// answer" for "not running" left such pods NOTREADY, and the kubelet killed and
// recreated every one of them. No pod may lose or restart a container, and the
// logger's output must reach its log again.
func (s *e2e) stepRestartBusyShims(t *testing.T) {
	before := s.snapshot(t)
	tickBefore, _ := lastTick(s.k, "logger")
	shims := s.shimsBut(t, "probe")
	cont := func() {
		for _, pid := range shims {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	s.env.Shimd.Kill9()
	for _, pid := range shims {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	start := time.Now()
	s.env.Shimd.StartUnrecovered(t) // its recovery waits 2 s for each busy shim's answers
	Eventually(t, 2*time.Minute, "shimd recovered (ListPodSandbox answers)", func() error {
		_, err := s.rt.ListPodSandbox(ctxT(t, 10*time.Second), &runtimeapi.ListPodSandboxRequest{})
		return err
	})
	cont()
	t.Logf("%d shims stopped across shimd's kill -9 and recovery (recovered %s after its start)", len(shims), time.Since(start).Round(time.Millisecond))
	s.compareCRI(t, before)
	Consistently(t, 30*time.Second, "pods keep the same containers and restart counts", func() error {
		return s.sameContainers(before)
	})
	s.waitTicksAfter(t, tickBefore)
	s.compareCRI(t, before)
}

// shimsBut returns the pids of the node's shims but the one of pod skip: an exec
// liveness probe (timeout 5 s, threshold 1) would fail through a stopped shim on
// any runtime.
func (s *e2e) shimsBut(t *testing.T, skip string) []int {
	all, err := harness.ShimPIDs(s.env.Containerd.Address())
	if err != nil || len(all) == 0 {
		harness.Fatalf(t, "the node's shims: %v, %v", all, err)
	}
	skipSandbox := s.sandbox(t, skip).Id
	// The pod's shim is named after the pod (its pause task started it) or, in a
	// pause-less pod, after the container whose task started it: found as the
	// parent of a running container of the pod.
	skipPIDs := map[int]bool{}
	for _, c := range s.containers(t, skipSandbox) {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if ppid := harness.ParentPID(s.containerPID(t, c.Id)); ppid > 0 {
			skipPIDs[ppid] = true
		}
	}
	var shims []int
	for _, pid := range all {
		if shimID(pid) != skipSandbox && !skipPIDs[pid] {
			shims = append(shims, pid)
		}
	}
	return shims
}

// containerPID is the pid of a running container's process (its verbose status).
func (s *e2e) containerPID(t *testing.T, id string) int {
	resp, err := s.rt.ContainerStatus(ctxT(t, 30*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		harness.Fatalf(t, "ContainerStatus %s: %v", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		harness.Fatalf(t, "ContainerStatus %s info: %v", id, err)
	}
	return info.Pid
}

// shimID is the -id argument of shim pid: the sandbox id of a pod's shim.
func shimID(pid int) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-id" || args[i] == "--id" {
			return args[i+1]
		}
	}
	return ""
}
