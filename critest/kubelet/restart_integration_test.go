//go:build integration

package kubelet

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// podSnapshot is what must survive restarts of shimd and the kubelet.
type podSnapshot struct {
	sandbox    string
	containers map[string]string // name -> container id (running)
	restarts   map[string]int32
}

// Step 6: kill -9 shimd and start it again, then restart the kubelet: the
// same sandboxes and containers keep running, restart counts do not move,
// the kubelet reports the pods again, logs keep flowing.
func (s *e2e) stepRestart(t *testing.T) {
	before := s.snapshot(t)
	tickBefore, _ := lastTick(s.k, "logger")

	start := time.Now()
	s.env.Shimd.Kill9()
	s.env.Shimd.Start(t)
	// shimd answers Version at once but other RPCs only after recovery.
	recovered := Eventually(t, time.Minute, "shimd recovered (ListPodSandbox answers)", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err
	})
	t.Logf("shimd killed, answering Version in %s, recovered %s later", time.Since(start).Round(time.Millisecond)-recovered, recovered)
	s.compareCRI(t, before)

	start = time.Now()
	s.k.Stop()
	s.k.Start(t)
	t.Logf("kubelet restarted in %s (pid %d)", time.Since(start).Round(time.Millisecond), s.k.PID())

	// The same containers run with the same restart counts (ready or not:
	// readiness restarts at "not ready" with each kubelet until its probe runs).
	same := func() error { return s.sameContainers(before) }
	ready := func() error {
		for _, name := range []string{"probe", "web"} {
			p, err := s.k.Pod(name)
			if err != nil {
				return err
			}
			if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
				return fmt.Errorf("pod %s: Ready is %q", name, podCondition(p, corev1.PodReady))
			}
		}
		return nil
	}
	took := Eventually(t, 2*time.Minute, "the kubelet reports the same running containers and restart counts, pods Ready", func() error {
		if err := same(); err != nil {
			return err
		}
		return ready()
	})
	t.Logf("kubelet caught up after %s", took)

	Eventually(t, time.Minute, "/runningpods/ lists the pods", func() error {
		rp, err := s.k.RunningPods()
		if err != nil {
			return err
		}
		names := map[string]bool{}
		for _, p := range rp {
			names[p.Name] = true
		}
		for _, n := range s.pods {
			if !names[s.k.MirrorName(n)] {
				return fmt.Errorf("%s missing from %v", n, names)
			}
		}
		return nil
	})
	Eventually(t, time.Minute, "hostPort answers after the restarts", func() error {
		code, _, err := httpGet(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", s.hostPort))
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	s.waitTicksAfter(t, tickBefore)
	// Then nothing may change over two sync periods and several probe runs.
	Consistently(t, 25*time.Second, "pods keep the same containers and restart counts", same)
	Eventually(t, 30*time.Second, "probe and web pods Ready", ready)
	s.compareCRI(t, before)
	res, err := s.k.Exec(ctxT(t, time.Minute), ExecRequest{Pod: "web", Container: "web", Command: []string{"echo", "after-restart"}})
	if err != nil || res.Stdout != "after-restart\n" {
		harness.Errorf(t, "exec after the restarts: %q, %v", res.Stdout, err)
	}
}

// Step 7: without manifests the kubelet stops and removes every container
// and sandbox (its garbage collection runs about once a minute), and nothing
// is left: no pods in shimd, netns, leases, nat rules, mounts, processes,
// pod cgroups, pod log dirs.
func (s *e2e) stepTeardown(t *testing.T) {
	for _, name := range s.pods {
		s.k.RemovePod(t, name)
	}
	took := Eventually(t, 2*time.Minute, "no pods in the kubelet's /pods", func() error {
		pods, err := s.k.Pods()
		if err != nil {
			return err
		}
		if len(pods) > 0 {
			return fmt.Errorf("%d pods left, first %s (%s)", len(pods), pods[0].Name, pods[0].Status.Phase)
		}
		return nil
	})
	t.Logf("/pods empty after %s", took)
	took = Eventually(t, 4*time.Minute, "no sandboxes or containers in shimd", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		sbs, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		ctrs, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		if len(sbs.Items)+len(ctrs.Containers) > 0 {
			var states []string
			for _, sb := range sbs.Items {
				states = append(states, sb.GetMetadata().GetName()+":"+sb.State.String())
			}
			return fmt.Errorf("%d sandboxes %v, %d containers", len(sbs.Items), states, len(ctrs.Containers))
		}
		return nil
	})
	t.Logf("shimd empty after %s", took)
	Eventually(t, 3*time.Minute, "pod log dirs, pod dirs and pod cgroups removed", func() error {
		if left := dirEntries(s.k.PodLogsDir); len(left) > 0 {
			return fmt.Errorf("pod log dirs %v", left)
		}
		if left := dirEntries(filepath.Join(s.k.RootDir, "pods")); len(left) > 0 {
			return fmt.Errorf("kubelet pod dirs %v", left)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods/*/pod*"); len(left) > 0 {
			return fmt.Errorf("pod cgroups %v", left)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods/pod*"); len(left) > 0 {
			return fmt.Errorf("pod cgroups %v", left)
		}
		return nil
	})
	if code, _, err := httpGet(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", s.hostPort)); err == nil {
		harness.Errorf(t, "hostPort %d still answers (%d) after teardown", s.hostPort, code)
	}
	// The harness's leak check, less the kubelet itself (its command line
	// names shimd's socket, which the check looks for).
	lc := s.env.LeakCheck()
	Eventually(t, time.Minute, "nothing leaked", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var leaks []string
		self := fmt.Sprintf("process pid %d ", s.k.PID())
		for _, l := range harness.FindLeaks(ctx, lc) {
			if !strings.HasPrefix(l, self) {
				leaks = append(leaks, l)
			}
		}
		if len(leaks) > 0 {
			return fmt.Errorf("leaks:\n  - %s", strings.Join(leaks, "\n  - "))
		}
		return nil
	})
}
