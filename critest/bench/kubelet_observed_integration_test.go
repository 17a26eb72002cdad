//go:build integration

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

// kubeletPoll is how often BenchmarkKubeletObserved asks the kubelet for the pod's
// status: the resolution of its samples.
const kubeletPoll = 10 * time.Millisecond

// plegModes are the kubelet's two ways of learning of container changes: relisting
// the runtime every second (generic), or GetContainerEvents (evented, an alpha
// feature gate: in v1.34 it replaced the relist, which ran every 300 s as a fallback;
// from v1.37 the 1 s relist stays and a container's stop event only hurries it).
var plegModes = []struct {
	name  string
	gates map[string]bool
}{
	{"generic PLEG", nil},
	{"evented PLEG", map[string]bool{"EventedPLEG": true}},
}

// observed is one cell of the table: the samples of one runtime in one PLEG mode, or
// why there are none.
type observed struct {
	running []time.Duration // manifest written -> Running in the kubelet's /pods
	started []time.Duration // manifest written -> the container's started_at in CRI
	na      string          // not available: why
}

// BenchmarkKubeletObserved is a pod start as a user sees it: a real kubelet (v1.37,
// standalone, critest/kubelet) on the runtime, a static pod manifest with one busybox
// container (`sleep 3600`) written into its staticPodPath, and the time until the
// kubelet's own /pods (the status its status manager holds, which it would send to an
// API server) reports that container Running, polled every 10 ms. A second row splits
// that time: manifest written -> the container's started_at as the runtime's
// ContainerStatus gives it (read after the round, so nothing polls the runtime); the
// rest is the kubelet's own lag, mostly its PLEG learning of the start. Both runtimes are
// on the same containerd, runc and CNI network (newPair); one kubelet runs at a time
// (the host-wide kubelet lock), so the runtimes go one after the other, each with a
// kubelet of its own: shimd, then containerd's CRI, with the generic PLEG, then the
// same with the evented PLEG. BENCH_KUBELET_ROUNDS (default 10) timed rounds per
// kubelet after 1 warm-up. After each round the manifest is removed; once the kubelet
// has stopped the pod, the benchmark removes the stopped sandbox through CRI (what the
// kubelet's container GC does within a minute) and waits until the runtime lists
// nothing. An evented row is "n/a" when the runtime refuses GetContainerEvents or the
// kubelet's metrics show it did not get the events.
func BenchmarkKubeletObserved(b *testing.B) {
	if _, err := os.Stat(kubelet.Binary()); err != nil {
		b.Skipf("no kubelet at %s: build it with hack/tools.sh kubelet", kubelet.Binary())
	}
	p := newPair(b)
	n := envInt("BENCH_KUBELET_ROUNDS", 10)
	targets := []*target{p.shimd, p.cd}
	endpoints := map[*target]string{p.shimd: p.shimdEndpoint, p.cd: "unix://" + p.env.Containerd.Address()}
	for _, tg := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	cells := map[string]*observed{} // by mode + "/" + runtime
	for _, mode := range plegModes {
		for _, tg := range targets {
			c := &observed{}
			cells[mode.name+"/"+tg.name] = c
			if mode.gates["EventedPLEG"] {
				if err := servesContainerEvents(tg.rt); err != nil {
					c.na = err.Error()
					continue
				}
			}
			ok := b.Run(strings.ReplaceAll(mode.name, " ", "-")+"/"+tg.name, func(b *testing.B) {
				c.running, c.started, c.na = tg.kubeletRounds(b, kubelet.Options{
					Dir: harness.NewBaseDir(b), RuntimeEndpoint: endpoints[tg], FeatureGates: mode.gates,
				}, n)
				b.ReportMetric(0, "ns/op")
				if c.na == "" {
					b.ReportMetric(ms(percentile(c.running, 50)), "running-p50-ms")
					b.ReportMetric(ms(percentile(c.running, 90)), "running-p90-ms")
					b.ReportMetric(ms(percentile(c.started, 50)), "cri-started-p50-ms")
				}
			})
			if !ok && c.na == "" {
				c.na = "failed (see the sub-benchmark's log)"
			}
		}
	}
	reportObserved(fmt.Sprintf("kubelet-observed pod start: static pod manifest written -> container Running in the kubelet's /pods (polled every %s); "+
		"%d rounds per runtime and PLEG mode after 1 warm-up, one kubelet %s at a time", kubeletPoll, n, kubelet.Version()), targets, cells)
}

// kubeletRounds starts a kubelet on tg and times rounds static pods. na is set when the
// kubelet ran the evented PLEG but did not get the runtime's events.
func (tg *target) kubeletRounds(b *testing.B, opts kubelet.Options, rounds int) (running, started []time.Duration, na string) {
	k := kubelet.Start(b, opts)
	// Runs before Start's cleanups: stop the kubelet so it makes nothing more, then
	// take down through CRI what a failed round left, so netns, leases and cgroups go
	// before the kubepods cgroups are removed and the leak check runs.
	b.Cleanup(func() {
		k.Stop()
		if err := tg.removeAllPods(); err != nil {
			b.Errorf("%s: remove the pods left: %v", tg.name, err)
		}
	})
	for round := -1; round < rounds; round++ {
		name := fmt.Sprintf("kl-%s-%d", tg.name, round+1)
		written, took := tg.observePodStart(b, k, name)
		if round >= 0 {
			running = append(running, took)
			started = append(started, tg.startedAfter(b, written))
		}
		k.RemovePod(b, name)
		tg.awaitPodGone(b)
	}
	if opts.FeatureGates["EventedPLEG"] {
		na = eventedPLEGProblem(b, k)
	}
	return running, started, na
}

// observePodStart writes the static pod and returns when, and the time until the
// kubelet reports its container Running.
func (tg *target) observePodStart(b *testing.B, k *kubelet.Kubelet, name string) (written time.Time, took time.Duration) {
	b.Helper()
	grace := int64(0) // the kubelet applies its minimum of 2 s to `sleep`, which ignores SIGTERM
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubelet.Namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: benchBusybox, Command: []string{"sleep", "3600"}, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			DNSPolicy:                     corev1.DNSDefault, // resolvConf "": an empty resolv.conf
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
		},
	}
	start := time.Now()
	k.WritePod(b, pod)
	deadline := start.Add(2 * time.Minute)
	for {
		p, err := k.Pod(name)
		if err == nil {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == "app" && cs.State.Running != nil {
					return start, time.Since(start)
				}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: the kubelet does not report pod %s's container Running after 2m: %v %+v", tg.name, name, err, p)
		}
		time.Sleep(kubeletPoll)
	}
}

// startedAfter returns how long after written the runtime's one running container
// started, by its ContainerStatus started_at.
func (tg *target) startedAfter(b *testing.B, written time.Time) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	cs, err := tg.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	require.NoError(b, err)
	require.Len(b, cs.Containers, 1, "%s: running containers", tg.name)
	st, err := tg.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs.Containers[0].Id})
	require.NoError(b, err)
	return time.Unix(0, st.GetStatus().GetStartedAt()).Sub(written)
}

// awaitPodGone waits until the kubelet has stopped the pod whose manifest was removed
// (every sandbox NOTREADY, no container running), removes the sandboxes through CRI
// and checks that the runtime lists no pod and no container.
func (tg *target) awaitPodGone(b testing.TB) {
	b.Helper()
	require.Eventually(b, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sbs, err := tg.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return false
		}
		for _, sb := range sbs.Items {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false
			}
		}
		cs, err := tg.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		}})
		return err == nil && len(cs.Containers) == 0
	}, 2*time.Minute, 50*time.Millisecond, "%s: the kubelet does not stop the pod whose manifest was removed", tg.name)
	require.NoError(b, tg.removeAllPods(), tg.name)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	sbs, err := tg.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	require.NoError(b, err)
	cs, err := tg.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	require.NoError(b, err)
	require.Empty(b, sbs.Items, "%s still lists pods", tg.name)
	require.Empty(b, cs.Containers, "%s still lists containers", tg.name)
}

// removeAllPods stops and removes every pod the runtime lists.
func (tg *target) removeAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	sbs, err := tg.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs.Items {
		// The kubelet may still be stopping the pod (a sandbox is NOTREADY once its
		// pause process is gone, before its network is down). containerd's CRI plugin
		// then fails a concurrent StopPodSandbox ("failed to delete \"eth0\": no such
		// device"), and the next one succeeds: retry a few times.
		var err error
		for try := 0; try < 10; try++ {
			if err = tg.removePod(sb.Id); err == nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// servesContainerEvents opens a GetContainerEvents stream: nil if the runtime keeps it
// open (no event within a second is what an idle runtime sends), else its error.
func servesContainerEvents(rt runtimeapi.RuntimeServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err == nil || status.Code(err) == codes.DeadlineExceeded {
		return nil
	}
	return fmt.Errorf("GetContainerEvents: %w", err)
}

// eventedPLEGProblem reads the kubelet's evented PLEG metrics: "" if it connected to
// GetContainerEvents without an error and received events, else what went wrong.
func eventedPLEGProblem(b *testing.B, k *kubelet.Kubelet) string {
	body, err := k.Get("/metrics")
	if err != nil {
		return fmt.Sprintf("kubelet /metrics: %v", err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && strings.HasPrefix(f[0], "kubelet_evented_pleg_") {
			m[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	conns, errs := m["kubelet_evented_pleg_connection_success_count"], m["kubelet_evented_pleg_connection_error_count"]
	events := m["kubelet_evented_pleg_connection_latency_seconds_count"]
	b.Logf("kubelet evented PLEG: %v connection(s), %v error(s), %v event(s) received", conns, errs, events)
	if conns < 1 || errs > 0 || events < 1 {
		return fmt.Sprintf("kubelet metrics: %v GetContainerEvents connection(s), %v error(s), %v event(s); kubelet errors: %s",
			conns, errs, events, k.LogTail(5, "E"))
	}
	if strings.Contains(k.LogTail(100000, "E"), "Evented PLEG: received ContainerEventResponse with nil") {
		return "the kubelet dropped events without a PodSandboxStatus: " + k.LogTail(3, "E")
	}
	return ""
}

// reportObserved prints the table: one row per PLEG mode, the p50/p90 of each runtime
// and the p50 ratio, or "n/a" and why.
func reportObserved(title string, targets []*target, cells map[string]*observed) {
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s\n", title)
	fmt.Fprintf(&out, "%-26s %10s %10s %15s %15s  %s\n",
		"operation", "shimd p50", "shimd p90", "containerd p50", "containerd p90", "ratio p50 (shimd/containerd)")
	var notes []string
	for _, mode := range plegModes {
		for _, tg := range targets {
			if c := cells[mode.name+"/"+tg.name]; c.na != "" {
				notes = append(notes, fmt.Sprintf("  %s, %s: not available: %s", tg.name, mode.name, c.na))
			}
		}
		short := strings.TrimSuffix(mode.name, " PLEG")
		fmt.Fprintln(&out, observedRow("kubelet Running, "+short, targets, cells, mode.name, func(c *observed) []time.Duration { return c.running }))
		fmt.Fprintln(&out, observedRow("  CRI started_at", targets, cells, mode.name, func(c *observed) []time.Duration { return c.started }))
	}
	for _, n := range notes {
		fmt.Fprintln(&out, n)
	}
	fmt.Fprint(os.Stdout, out.String())
}

// observedRow is one line of reportObserved: the samples of each runtime that sample
// picks, or n/a.
func observedRow(op string, targets []*target, cells map[string]*observed, mode string, sample func(*observed) []time.Duration) string {
	line := fmt.Sprintf("%-26s", op)
	var p50 []float64
	for i, tg := range targets {
		width := 10
		if i > 0 {
			width = 15
		}
		c := cells[mode+"/"+tg.name]
		if c.na != "" {
			line += fmt.Sprintf(" %*s %*s", width, "n/a", width, "n/a")
			continue
		}
		s50, s90 := percentile(sample(c), 50), percentile(sample(c), 90)
		p50 = append(p50, ms(s50))
		line += fmt.Sprintf(" %*.1fms %*.1fms", width-2, ms(s50), width-2, ms(s90))
	}
	if len(p50) == 2 {
		return line + fmt.Sprintf("  %.2fx", p50[0]/p50[1])
	}
	return line + "  n/a"
}
