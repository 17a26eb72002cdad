//go:build integration

package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Pods of TestKubeletContainerdKill9, and how long containerd stays down: the
// RestartSec of containerd's own systemd unit.
const (
	tickerPods        = 30
	containerdDownFor = 5 * time.Second
)

// tickerPod prints "tick N" every second until /tmp/exit, or exit in the host
// directory ctl (mounted at /ctl), appears, then prints "exiting", removes
// /ctl/exit (its next start runs on) and exits with code 3; it has an exec
// liveness probe.
func tickerPod(name, ctl string) *corev1.Pod {
	c := shell("logger", BusyboxImage, `touch /tmp/healthy
j=0
while [ ! -f /tmp/exit ] && [ ! -f /ctl/exit ]; do j=$((j+1)); echo "tick $j"; sleep 1; done
echo exiting
rm -f /ctl/exit
exit 3`)
	c.LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
		PeriodSeconds: 4, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1,
	}
	c.VolumeMounts = mount("ctl", "/ctl")
	p := newPod(name, c)
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	p.Spec.Volumes = []corev1.Volume{{Name: "ctl", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: ctl, Type: &dirOrCreate}}}}
	return p
}

// TestKubeletContainerdKill9: 30 running pods under a live kubelet, each
// writing a log line a second with an exec liveness probe; containerd is
// killed with SIGKILL and started again 5 s later. Every pod stays Running
// throughout (the kubelet's /pods, polled every second from before the kill),
// with the same sandbox and container ids and restart counts; shimd has no new
// sandbox; `logs -f` streams opened before the kill see lines written after
// it; no log line is lost or doubled; exec works in every pod. Then a
// container's own exit after the restart is seen, one that exits while
// containerd is down again keeps its exit code, and the teardown and the leak
// check.
func TestKubeletContainerdKill9(t *testing.T) {
	s := startE2E(t, nil)
	if s == nil {
		return
	}
	ctl := filepath.Join(s.env.Base, "ctl")
	for i := 0; i < tickerPods; i++ {
		name := fmt.Sprintf("tick%02d", i)
		s.pods = append(s.pods, name)
		s.k.WritePod(t, tickerPod(name, filepath.Join(ctl, name)))
	}
	took := Eventually(t, 5*time.Minute, fmt.Sprintf("%d pods running, each with ticks in its log", tickerPods), func() error {
		pods, err := s.k.Pods()
		if err != nil {
			return err
		}
		up := 0
		for i := range pods {
			if running(&pods[i], false, "logger") == nil {
				up++
			}
		}
		if up < tickerPods {
			return fmt.Errorf("%d of %d pods running", up, tickerPods)
		}
		for _, name := range s.pods {
			if _, err := lastTick(s.k, name); err != nil {
				return fmt.Errorf("pod %s: %v", name, err)
			}
		}
		return nil
	})
	t.Logf("%d pods running after %s", tickerPods, took)

	before := s.snapshot(t)
	// Before the kill the probes keep every container as it is, or the
	// checks below would blame containerd's restart for what the load does.
	Consistently(t, 10*time.Second, "pods keep their containers before the kill", func() error { return s.sameContainers(before) })
	ticksBefore := map[string]int{}
	for _, name := range s.pods {
		n, err := lastTick(s.k, name)
		if err != nil {
			harness.Fatalf(t, "before the kill: %v", err)
		}
		ticksBefore[name] = n
	}

	ctx, cancel := context.WithCancel(context.Background())
	followers := []*follower{}
	for _, name := range []string{s.pods[0], s.pods[tickerPods/2], s.pods[tickerPods-1]} {
		followers = append(followers, followLogs(ctx, s.k, name))
	}
	w := watchPods(ctx, s, before)
	t.Cleanup(func() {
		cancel()
		w.wait()
		for _, f := range followers {
			f.wait()
		}
	})
	Eventually(t, 30*time.Second, "logs -f streams see ticks", func() error {
		for _, f := range followers {
			if f.state().last == 0 {
				return fmt.Errorf("no tick from %s's stream yet (%s)", f.pod, f.state().breaks)
			}
		}
		return nil
	})

	back := s.killContainerd(t, before[s.pods[0]].containers["logger"], nil)

	took = Eventually(t, 2*time.Minute, "the kubelet reports the same running containers and restart counts", func() error {
		return s.sameContainers(before)
	})
	t.Logf("kubelet reports the pods as before %s after shimd ran an ExecSync again", took)

	took = Eventually(t, time.Minute, "logs -f streams opened before the kill see new lines", func() error {
		for _, f := range followers {
			st := f.state()
			if !st.lastAt.After(back) || st.last <= ticksBefore[f.pod]+int(containerdDownFor/time.Second) {
				return fmt.Errorf("pod %s: stream's newest tick %d at %s, %d before the kill (connections %d, ends %v)",
					f.pod, st.last, st.lastAt.Format(time.StampMilli), ticksBefore[f.pod], st.connects, st.breaks)
			}
		}
		return nil
	})
	for _, f := range followers {
		st := f.state()
		t.Logf("logs -f of %s: %d connection(s), stream ends %v, newest tick %d", f.pod, st.connects, st.breaks, st.last)
	}
	t.Logf("logs -f streams saw new lines %s after the kubelet caught up", took)

	start := time.Now()
	for _, name := range s.pods {
		res, err := s.k.Exec(ctxT(t, time.Minute), ExecRequest{Pod: name, Container: "logger", Command: []string{"echo", "after-" + name}})
		if err != nil || res.Stdout != "after-"+name+"\n" {
			harness.Errorf(t, "exec in %s after containerd's restart: %q, %v", name, res.Stdout, err)
		}
	}
	t.Logf("exec through the kubelet in each of %d pods took %s", len(s.pods), time.Since(start).Round(time.Millisecond))

	Eventually(t, 30*time.Second, "every pod's log has new ticks (/containerLogs)", func() error {
		for _, name := range s.pods {
			n, err := lastTick(s.k, name)
			if err != nil {
				return fmt.Errorf("pod %s: %v", name, err)
			}
			if n <= ticksBefore[name]+int(containerdDownFor/time.Second) {
				return fmt.Errorf("pod %s: last tick %d, %d before the kill", name, n, ticksBefore[name])
			}
		}
		return nil
	})

	// Nothing may change over six sync periods and 15 probe runs per pod.
	Consistently(t, 60*time.Second, "pods keep the same containers and restart counts", func() error { return s.sameContainers(before) })
	s.compareCRI(t, before)
	cancel()
	w.wait()
	if n, errs, dev := w.result(); dev != "" {
		harness.Errorf(t, "the kubelet's /pods changed while containerd restarted (%d polls, %d failed): %s", n, errs, dev)
	} else {
		t.Logf("/pods polled %d times across the kill (%d polls failed): no change", n, errs)
	}
	for _, name := range s.pods {
		if err := checkTicks(s.k, name); err != nil {
			harness.Errorf(t, "pod %s: %v", name, err)
		}
	}
	if t.Failed() {
		return
	}
	t.Run("exit_after_restart", func(t *testing.T) { s.stepExitAfterRestart(t, before) })
	t.Run("exit_while_containerd_down", func(t *testing.T) { s.stepExitWhileDown(t, before, ctl) })
	t.Run("teardown", s.stepTeardown)
}

// stepExitAfterRestart: shimd still follows containerd's task events after the
// restart. A container that exits by itself is EXITED with its code (3), and
// the kubelet starts it again.
func (s *e2e) stepExitAfterRestart(t *testing.T, before map[string]podSnapshot) {
	name := s.pods[0]
	start := time.Now()
	if _, err := s.k.Exec(ctxT(t, time.Minute), ExecRequest{Pod: name, Container: "logger", Command: []string{"touch", "/tmp/exit"}}); err != nil {
		harness.Fatalf(t, "exec touch /tmp/exit: %v", err)
	}
	s.waitExitRestart(t, name, before[name].containers["logger"], start)
}

// stepExitWhileDown: a container that exits while containerd is down is EXITED
// with its own code and time once containerd is back (its exit event was never
// published), and the kubelet starts it again.
func (s *e2e) stepExitWhileDown(t *testing.T, before map[string]podSnapshot, ctl string) {
	name := s.pods[1]
	var exitedBy time.Time
	s.killContainerd(t, before[s.pods[2]].containers["logger"], func() {
		if err := os.WriteFile(filepath.Join(ctl, name, "exit"), nil, 0o644); err != nil {
			harness.Fatalf(t, "%v", err)
		}
		// shimd copies the output whether containerd runs or not.
		Eventually(t, 10*time.Second, name+" says it exits", func() error {
			out, err := s.k.ContainerLogs(name, "logger", LogOptions{TailLines: 1})
			if err == nil && out != "exiting\n" {
				err = fmt.Errorf("last line %q", out)
			}
			return err
		})
		time.Sleep(time.Second) // exit 3 follows the echo
		exitedBy = time.Now()
	})
	finished := s.waitExitRestart(t, name, before[name].containers["logger"], exitedBy)
	if finished.After(exitedBy) {
		harness.Errorf(t, "the kubelet: %s finished at %s, after it had exited (by %s)", name,
			finished.Format(time.StampMilli), exitedBy.Format(time.StampMilli))
	}
}

// waitExitRestart waits until the kubelet has started container old of pod name
// again, once, after its exit with code 3, and returns when it finished (the
// kubelet's, to the second). While shimd still has old, CRI must report it EXITED
// with code 3 (the kubelet may remove it soon after the restart).
func (s *e2e) waitExitRestart(t *testing.T, name, old string, since time.Time) time.Time {
	t.Helper()
	var finished time.Time
	Eventually(t, time.Minute, "the kubelet restarted the container once, after exit code 3", func() error {
		resp, err := s.rt.ContainerStatus(ctxT(t, 10*time.Second), &runtimeapi.ContainerStatusRequest{ContainerId: old})
		if st := resp.GetStatus(); err == nil && st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode != 3 {
			harness.Fatalf(t, "CRI: %s exited with code %d (%s), want 3", name, st.ExitCode, st.Reason)
		}
		p, err := s.k.Pod(name)
		if err != nil {
			return err
		}
		cs := containerStatus(p, "logger")
		switch {
		case cs == nil || cs.RestartCount != 1 || cs.State.Running == nil || criID(cs.ContainerID) == old:
			return fmt.Errorf("status %+v", cs)
		case cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3:
			return fmt.Errorf("last termination %+v", cs.LastTerminationState)
		}
		finished = cs.LastTerminationState.Terminated.FinishedAt.Time
		return nil
	})
	t.Logf("%s restarted %s after %s", name, time.Since(since).Round(100*time.Millisecond), since.Format(time.StampMilli))
	return finished
}

// killContainerd kills containerd with SIGKILL, runs whileDown (if any), keeps
// it down for at least containerdDownFor, starts it again and logs how long
// until shimd says the runtime is ready and runs an ExecSync in container ctr
// again. It returns when containerd answered again.
func (s *e2e) killContainerd(t *testing.T, ctr string, whileDown func()) time.Time {
	t.Helper()
	execSync := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := s.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"true"}, Timeout: 5})
		if err == nil && resp.ExitCode != 0 {
			err = fmt.Errorf("exit code %d: %s", resp.ExitCode, resp.Stderr)
		}
		return err
	}
	runtimeReady := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := s.rt.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return err
		}
		for _, c := range st.GetStatus().GetConditions() {
			if c.Type == runtimeapi.RuntimeReady && !c.Status {
				return fmt.Errorf("RuntimeReady false: %s %s", c.Reason, c.Message)
			}
		}
		return nil
	}
	if err := execSync(); err != nil {
		harness.Fatalf(t, "ExecSync before the kill: %v", err)
	}

	pid, killed := s.env.Containerd.PID(), time.Now()
	s.env.Containerd.Kill()
	time.Sleep(containerdDownFor / 2)
	t.Logf("containerd down: Status: %v; ExecSync: %v", runtimeReady(), execSync())
	if whileDown != nil {
		whileDown()
	}
	time.Sleep(time.Until(killed.Add(containerdDownFor)))
	started := time.Now()
	s.env.Containerd.Restart(t)
	up := time.Now()
	t.Logf("containerd (pid %d) killed, down for %s; pid %d answering Version %s after its start",
		pid, started.Sub(killed).Round(time.Millisecond), s.env.Containerd.PID(), up.Sub(started).Round(time.Millisecond))
	for _, c := range []struct {
		what string
		f    func() error
	}{{"Status says RuntimeReady", runtimeReady}, {"ExecSync runs again", execSync}} {
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err = c.f(); err == nil {
				break
			}
		}
		if err != nil {
			harness.Fatalf(t, "shimd after containerd's restart: %s: not after a minute: %v", c.what, err)
		}
		t.Logf("shimd: %s %s after containerd answered", c.what, time.Since(up).Round(time.Millisecond))
	}
	return up
}
