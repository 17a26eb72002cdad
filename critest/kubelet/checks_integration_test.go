//go:build integration

package kubelet

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// criID strips the runtime prefix from a kubelet container id ("shimd://ID").
func criID(kubeletID string) string {
	if i := strings.Index(kubeletID, "://"); i >= 0 {
		return kubeletID[i+3:]
	}
	return kubeletID
}

// sandbox returns the one ready CRI sandbox of a static pod.
func (s *e2e) sandbox(t testing.TB, pod string) *runtimeapi.PodSandbox {
	t.Helper()
	resp, err := s.rt.ListPodSandbox(ctxT(t, 30*time.Second), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.name": s.k.MirrorName(pod), "io.kubernetes.pod.namespace": Namespace},
	}})
	if err != nil {
		harness.Fatalf(t, "ListPodSandbox: %v", err)
	}
	if len(resp.Items) != 1 {
		harness.Fatalf(t, "pod %s: %d ready sandboxes in shimd, want 1: %v", pod, len(resp.Items), resp.Items)
	}
	return resp.Items[0]
}

// containers lists the CRI containers of a sandbox.
func (s *e2e) containers(t testing.TB, sandboxID string) []*runtimeapi.Container {
	t.Helper()
	resp, err := s.rt.ListContainers(ctxT(t, 30*time.Second), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID},
	})
	if err != nil {
		harness.Fatalf(t, "ListContainers: %v", err)
	}
	return resp.Containers
}

// pauseless tells whether shimd runs the pod without a pause process (its verbose
// status says so; shimd's default, when-needed, for a pod that shares no PID
// namespace).
func (s *e2e) pauseless(t testing.TB, sandboxID string) bool {
	t.Helper()
	resp, err := s.rt.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID, Verbose: true})
	if err != nil {
		harness.Fatalf(t, "PodSandboxStatus: %v", err)
	}
	var info struct {
		Pauseless bool `json:"pauseless"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		harness.Fatalf(t, "PodSandboxStatus info: %v", err)
	}
	return info.Pauseless
}

// snapshot records each test pod's sandbox, running containers and restart
// counts, from the kubelet, checked against CRI.
func (s *e2e) snapshot(t testing.TB) map[string]podSnapshot {
	t.Helper()
	out := map[string]podSnapshot{}
	for _, name := range s.pods {
		p, err := s.k.Pod(name)
		if err != nil {
			harness.Fatalf(t, "before the restart: %v", err)
		}
		snap := podSnapshot{sandbox: s.sandbox(t, name).Id, containers: map[string]string{}, restarts: map[string]int32{}}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				harness.Fatalf(t, "before the restart: pod %s container %s is not running: %s", name, cs.Name, stateString(cs.State))
			}
			snap.containers[cs.Name] = criID(cs.ContainerID)
			snap.restarts[cs.Name] = cs.RestartCount
		}
		out[name] = snap
	}
	return out
}

// sameContainers tells how the kubelet's /pods differs from the snapshot: a pod
// that is gone or not Running, a container not running, with another id or
// another restart count.
func (s *e2e) sameContainers(before map[string]podSnapshot) error {
	pods, err := s.k.Pods()
	if err != nil {
		return err
	}
	return s.diffPods(pods, before)
}

// diffPods is sameContainers on a /pods the caller read.
func (s *e2e) diffPods(pods []corev1.Pod, before map[string]podSnapshot) error {
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	for _, name := range s.pods {
		p := byName[s.k.MirrorName(name)]
		if p == nil {
			return fmt.Errorf("pod %s not in the kubelet's /pods", s.k.MirrorName(name))
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s: phase %s", name, p.Status.Phase)
		}
		b := before[name]
		for cname, id := range b.containers {
			cs := containerStatus(p, cname)
			if cs == nil || cs.State.Running == nil {
				return fmt.Errorf("pod %s container %s: not running: %+v", name, cname, cs)
			}
			if criID(cs.ContainerID) != id {
				return fmt.Errorf("pod %s container %s: id %s, was %s", name, cname, cs.ContainerID, id)
			}
			if cs.RestartCount != b.restarts[cname] {
				return fmt.Errorf("pod %s container %s: restartCount %d, was %d", name, cname, cs.RestartCount, b.restarts[cname])
			}
		}
	}
	return nil
}

// compareCRI checks that shimd has exactly the snapshot's sandboxes (ready)
// and running containers.
func (s *e2e) compareCRI(t testing.TB, before map[string]podSnapshot) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	sbs, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		harness.Fatalf(t, "ListPodSandbox: %v", err)
	}
	wantSB := map[string]string{}
	wantCtr := map[string]string{}
	for name, b := range before {
		wantSB[b.sandbox] = name
		for cname, id := range b.containers {
			wantCtr[id] = name + "/" + cname
		}
	}
	for _, sb := range sbs.Items {
		if _, ok := wantSB[sb.Id]; !ok {
			harness.Errorf(t, "CRI: new sandbox %s %s (%s)", sb.Id, sb.GetMetadata().GetName(), sb.State)
		} else if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			harness.Errorf(t, "CRI: sandbox of %s is %s", wantSB[sb.Id], sb.State)
		}
		delete(wantSB, sb.Id)
	}
	for id, name := range wantSB {
		harness.Errorf(t, "CRI: sandbox %s of %s is gone", id, name)
	}
	ctrs, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		harness.Fatalf(t, "ListContainers: %v", err)
	}
	for _, c := range ctrs.Containers {
		if _, ok := wantCtr[c.Id]; !ok {
			harness.Errorf(t, "CRI: new running container %s %s", c.Id, c.GetMetadata().GetName())
		}
		delete(wantCtr, c.Id)
	}
	for id, name := range wantCtr {
		harness.Errorf(t, "CRI: container %s (%s) no longer runs", id, name)
	}
}

// forceRemovePods stops and removes through CRI every sandbox and container
// shimd still has (after a failure, with the kubelet stopped). Each call has
// its own timeout; after one times out, shimd is taken for hung and the
// rest is left to the harness (containerd purge) and the cgroup cleanup.
func (s *e2e) forceRemovePods(t testing.TB) {
	hung := false
	call := func(what string, f func(ctx context.Context) error) {
		if hung {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := f(ctx); err != nil {
			t.Logf("cleanup: %s: %v", what, err)
			hung = ctx.Err() != nil
		}
	}
	var ctrs []*runtimeapi.Container
	call("ListContainers", func(ctx context.Context) error {
		resp, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		ctrs = resp.GetContainers()
		return err
	})
	for _, c := range ctrs {
		call("StopContainer "+c.Id, func(ctx context.Context) error {
			_, err := s.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 1})
			return err
		})
		call("RemoveContainer "+c.Id, func(ctx context.Context) error {
			_, err := s.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id})
			return err
		})
	}
	var sbs []*runtimeapi.PodSandbox
	call("ListPodSandbox", func(ctx context.Context) error {
		resp, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		sbs = resp.GetItems()
		return err
	})
	for _, sb := range sbs {
		t.Logf("cleanup: removing sandbox %s (%s) through CRI", sb.Id, sb.GetMetadata().GetName())
		call("StopPodSandbox "+sb.Id, func(ctx context.Context) error {
			_, err := s.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
			return err
		})
		call("RemovePodSandbox "+sb.Id, func(ctx context.Context) error {
			_, err := s.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
			return err
		})
	}
}

// Consistently calls f every half second for d and fails the test at the
// first error: an observation window for "nothing changes", not a wait.
func Consistently(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := f(); err != nil {
			harness.Fatalf(t, "%s: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

var tickRE = regexp.MustCompile(`(?m)^tick (\d+)$`)

// waitTicksAfter waits until the logger's log has ticks past tickBefore+2: its
// output reaches its log again after a restart of shimd.
func (s *e2e) waitTicksAfter(t *testing.T, tickBefore int) {
	t.Helper()
	Eventually(t, 30*time.Second, "logger's output reaches its log after shimd's restart", func() error {
		n, err := lastTick(s.k, "logger")
		if err != nil {
			return err
		}
		if n <= tickBefore+2 {
			return fmt.Errorf("last tick %d, before the restart %d", n, tickBefore)
		}
		return nil
	})
}

// lastTick is the number of the logger's newest "tick N" in /containerLogs.
func lastTick(k *Kubelet, pod string) (int, error) {
	out, err := k.ContainerLogs(pod, "logger", LogOptions{TailLines: 3})
	if err != nil {
		return 0, err
	}
	m := tickRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("no tick in the last lines %q", trim(out, 300))
	}
	return strconv.Atoi(m[len(m)-1][1])
}

// checkLogContinuity reads the logger's log files (rotated ones, possibly
// gzipped, oldest first, then the current one) in CRI format and checks that
// the numbered lines and ticks follow each other with no gap or repeat.
func checkLogContinuity(files []string) error {
	sort.Slice(files, func(i, j int) bool { return logOrder(files[i]) < logOrder(files[j]) })
	var lastLine, lastTick, lines int
	done := false
	for _, f := range files {
		err := readCRILog(f, func(msg string) error {
			lines++
			switch {
			case strings.HasPrefix(msg, "line "):
				n, _ := strconv.Atoi(strings.Fields(msg)[1])
				if lastLine != 0 && n != lastLine+1 {
					return fmt.Errorf("%s: line %d follows line %d", filepath.Base(f), n, lastLine)
				}
				lastLine = n
			case msg == "logger-done":
				if lastLine != loggerLines && lastLine != 0 {
					return fmt.Errorf("%s: logger-done after line %d", filepath.Base(f), lastLine)
				}
				done = true
			case strings.HasPrefix(msg, "tick "):
				n, _ := strconv.Atoi(strings.TrimPrefix(msg, "tick "))
				if lastTick != 0 && n != lastTick+1 {
					return fmt.Errorf("%s: tick %d follows tick %d", filepath.Base(f), n, lastTick)
				}
				lastTick = n
			default:
				return fmt.Errorf("%s: unexpected line %q", filepath.Base(f), trim(msg, 100))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if lines == 0 || (!done && lastLine == 0) {
		return fmt.Errorf("no logger output in %v", files)
	}
	return nil
}

// logOrder sorts "0.log.20250101-000000.gz" < "0.log.20250101-000001" < "0.log".
func logOrder(path string) string {
	b := strings.TrimSuffix(filepath.Base(path), ".gz")
	if i := strings.Index(b, ".log."); i >= 0 {
		return "0" + b[i+5:]
	}
	return "1" // the current file is the newest
}

// readCRILog calls f with the message of each full line of a CRI log file
// ("<time> <stream> <P|F> <msg>"), joining partial lines.
func readCRILog(path string, f func(msg string) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	var r io.Reader = fh
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(fh)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var partial strings.Builder
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 3 {
			return fmt.Errorf("%s: malformed CRI log line %q", filepath.Base(path), trim(sc.Text(), 100))
		}
		msg := ""
		if len(parts) == 4 {
			msg = parts[3]
		}
		partial.WriteString(msg)
		if parts[2] == "P" {
			continue
		}
		if err := f(partial.String()); err != nil {
			return err
		}
		partial.Reset()
	}
	return sc.Err()
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func dirEntries(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A port taken between FreePort and the kubelet's bind makes the kubelet exit
// ("bind: address already in use"; it failed CI so once). Start then gives it
// new ports and it comes up.
func TestKubeletStartsWhenItsPortIsTaken(t *testing.T) {
	s := startE2EWith(t, nil, func(o *Options) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		o.Port = l.Addr().(*net.TCPAddr).Port
		t.Logf("port %d held by the test", o.Port)
	})
	if s == nil {
		return
	}
	log, err := os.ReadFile(s.k.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "===== test: kubelet starting"); n != 2 {
		t.Errorf("kubelet started %d times, want 2 (the first on the held port)", n)
	}
	if !strings.Contains(string(log), "address already in use") {
		t.Errorf("the first kubelet did not say its port was in use")
	}
	if _, err := s.k.Get("/pods"); err != nil {
		t.Errorf("kubelet on port %d: %v", s.k.Port, err)
	}
	t.Logf("kubelet up on port %d after the held one: %s", s.k.Port, lineWith(string(log), "address already in use"))
}
