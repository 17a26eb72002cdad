//go:build integration

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/cluster"
	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

// densityResult is one runtime's run of BenchmarkKubeletDensity.
type densityResult struct {
	startAll, deleteAll time.Duration
	// The whole machine from the apply until every replica was ready.
	startMachine machineSnap
	// Over the same window, the processes' CPU and their threads' time runnable
	// without a CPU: who waited while the pods started (threads that exited
	// meanwhile not counted: see threadRunqs.since).
	startRunq []namedRunq
	// The kubelet's own histograms at the end of the steady window.
	metrics map[string]histogram
	// shimd's shimd_rpc_duration_seconds once every pod has started (its handler's
	// time, to set beside the kubelet's wait), with BENCH_SHIMD_METRICS; nil else.
	handler map[string]histogram
	// The kubelet's API client once every pod has started: each verb's wait in its
	// rate limiter (kubeAPIQPS, kubeAPIBurst) and its requests' latency.
	client map[string]histogram
	// Housekeepings over 1 s until every pod had started (the kubelet's log).
	housekeeps     int
	housekeepTotal time.Duration
	// Each pod's start SLI and its four parts, from the kubelet's log (sliPhases).
	phases map[string][]time.Duration
	// What the kubelet's sync loop did while the pods arrived: only from a kubelet at
	// --v=4 (BENCH_DENSITY_KUBELET_V), loopOK.
	loop   syncLoopWindow
	loopOK bool
	// Over the steady window: CPU in ms per s, memory at its end.
	kubeletCPU, runtimeCPU, shimCPU float64
	kubeletRSS, runtimeRSS, shimRSS int64
	runtimeAnon, shimAnon           int64
	shims                           int
	steady                          time.Duration
}

// BenchmarkKubeletDensity is a node of BENCH_DENSITY_PODS (default 110, the kubelet's
// max-pods) pods as the kubelet sees it: the one-node cluster of critest/cluster
// (v1.37.2 control plane and kubelet) on each runtime in turn, a Deployment of that many
// busybox replicas with an exec readiness probe every 10 s, and from the kubelet's own
// /metrics its pod start SLI (kubelet_pod_start_sli_duration_seconds: API server
// creation to running, image pulls excluded), kubelet_pod_start_duration_seconds and
// kubelet_runtime_operations_duration_seconds per operation; then BENCH_DENSITY_STEADY
// (default 5m) of steady state in which the kubelet's PLEG, stats and probes are the
// only load, with the CPU and memory of the kubelet, the runtime's daemons and the
// shims; then the time until deleting the Deployment leaves no pod in the API. shimd
// (in BENCH_PAUSE's mode) and containerd's CRI share one containerd, runc and CNI
// network, each warmed first by an untimed burst of BENCH_DENSITY_WARMUP_PODS (default
// 20; 0 skips it) through CRI; one cluster runs at a time (the host-wide kubelet lock),
// shimd first unless BENCH_DENSITY_CRI_FIRST=1. BENCH_DENSITY_KUBELET_V sets the
// kubelets' --v (default 2; at 4 BENCH_DENSITY_LOG_DIR's logs show what their sync
// loops did between a pod's binding and its SyncLoop ADD).
func BenchmarkKubeletDensity(b *testing.B) {
	if _, err := os.Stat(kubelet.Binary()); err != nil {
		b.Skipf("no kubelet at %s: build it with hack/tools.sh cluster", kubelet.Binary())
	}
	p := newPair(b)
	n := envInt("BENCH_DENSITY_PODS", 110)
	steady := time.Duration(envInt("BENCH_DENSITY_STEADY_S", 300)) * time.Second
	targets := []*target{p.shimd, p.cd}
	first := 0
	if os.Getenv("BENCH_DENSITY_CRI_FIRST") == "1" {
		first = 1
	}
	endpoints := map[*target]string{p.shimd: p.shimdEndpoint, p.cd: "unix://" + p.env.Containerd.Address()}
	res := map[*target]*densityResult{}
	for _, tg := range turns(targets, first) {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := tg.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: benchBusybox}})
		cancel()
		require.NoError(b, err, tg.name)
	}
	// An untimed burst through each runtime first, as BenchmarkBurst's warm-up: the
	// first side of a run that followed an idle machine started its pods up to three
	// times slower in shimd's own handler than any later side (docs/benchmarks.md).
	if warm := envInt("BENCH_DENSITY_WARMUP_PODS", 20); warm > 0 {
		for _, tg := range turns(targets, first) {
			tg.burstTeardown(b, -1, tg.burst(b, -1, warm))
		}
	}
	for _, tg := range turns(targets, first) {
		b.Run(tg.name, func(b *testing.B) {
			res[tg] = tg.density(b, endpoints[tg], p.env.CNI.Gateway.String(), p.env.Containerd.Address(), n, steady)
			b.ReportMetric(0, "ns/op")
		})
	}
	if res[p.shimd] == nil || res[p.cd] == nil {
		b.Fatal("a runtime's run failed (see its sub-benchmark)")
	}
	reportDensity(b, n, p.shimd, p.cd, res)
}

// density runs one runtime's cluster and measures it.
func (tg *target) density(b *testing.B, endpoint, nodeIP, shimAddress string, n int, steady time.Duration) *densityResult {
	cfg := map[string]any{"maxPods": max(110, n)}
	c := cluster.Start(b, cluster.Options{RuntimeEndpoint: endpoint, NodeName: "density-" + tg.name, NodeIP: nodeIP, KubeletConfig: cfg,
		KubeletVerbosity: envInt("BENCH_DENSITY_KUBELET_V", 0)})
	// Runs before the cluster's own cleanups: what the kubelet left stopped goes through
	// CRI, as its container GC would, so the pair's check finds nothing listed.
	b.Cleanup(func() {
		if err := tg.removeAllPods(); err != nil {
			b.Errorf("%s: removing what the kubelet left: %v", tg.name, err)
		}
	})
	r := &densityResult{steady: steady}
	groups := []struct {
		name string
		pids []int
	}{
		{"kube-scheduler", []int{c.Scheduler.PID()}},
		{"kube-apiserver + etcd", []int{c.APIServer.PID(), c.Etcd.PID()}},
		{"kube-controller-manager", []int{c.ControllerManager.PID()}},
		{"kubelet", []int{c.Kubelet.PID()}},
		{"runtime daemons", tg.daemons},
	}
	runqs := func() []threadRunqs {
		var rs []threadRunqs
		for _, g := range groups {
			r, err := runqOf(g.pids...)
			require.NoError(b, err, g.name)
			rs = append(rs, r)
		}
		return rs
	}
	// The test's own watch, to split the pods' arrival at the kubelet (arrival.go).
	wctx, wcancel := context.WithCancel(context.Background())
	watch := c.KubectlCmd(wctx, "get", "pods", "-l", "app=density", "-w", "--output-watch-events", "-o",
		`jsonpath={.type} {.object.metadata.namespace}/{.object.metadata.name} {.object.spec.nodeName}{"\n"}`)
	wout, err := watch.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, watch.Start())
	b.Cleanup(func() { wcancel(); _ = watch.Wait() })
	seenc := make(chan map[string]podSeen, 1)
	go func() { seenc <- watchArrivals(wout, time.Now) }()
	time.Sleep(3 * time.Second) // its list and watch begin before the first pod
	q0 := runqs()
	m0, err := readMachine()
	require.NoError(b, err)
	t0 := time.Now()
	c.Apply(b, densityDeployment(n))
	c.WaitFor(b, time.Duration(n)*3*time.Second+2*time.Minute, fmt.Sprintf("%d ready replicas", n), func() error {
		out, err := c.Kubectl(b, "get", "deployment", "density", "-o", "jsonpath={.status.readyReplicas}")
		if err != nil {
			return err
		}
		if got, _ := strconv.Atoi(strings.TrimSpace(out)); got != n {
			return fmt.Errorf("%s of %d ready", out, n)
		}
		return nil
	})
	r.startAll = time.Since(t0)
	m1, err := readMachine()
	require.NoError(b, err)
	r.startMachine = m1.since(m0)
	for i, q := range runqs() {
		r.startRunq = append(r.startRunq, namedRunq{groups[i].name, q.since(q0[i])})
	}
	time.Sleep(10 * time.Second) // the last pods' first probes and stats
	if sock := os.Getenv("BENCH_SHIMD_METRICS"); sock != "" && tg.name == "shimd" {
		r.handler = shimdHandlerTimes(b, sock)
	}
	text, err := c.Kubelet.Get("/metrics")
	require.NoError(b, err)
	r.client, err = parseHistograms(string(text), clientLimiter, clientLatency, statusSync)
	require.NoError(b, err)
	klog, err := os.ReadFile(c.Kubelet.LogPath)
	require.NoError(b, err)
	r.phases, err = sliPhases(string(klog))
	require.NoError(b, err, "the kubelet's log")
	wcancel()
	arrivals, err := arrivalPhases(string(klog), <-seenc)
	require.NoError(b, err, "the kubelet's log")
	for k, v := range arrivals {
		r.phases[k] = v
	}
	r.housekeeps, r.housekeepTotal, err = housekeepingOverruns(string(klog))
	require.NoError(b, err, "the kubelet's log")
	r.loop, r.loopOK, err = syncLoopQueue(string(klog), time.Now())
	require.NoError(b, err, "the kubelet's log")

	kpid := c.Kubelet.PID()
	usage := func() (daemonUsage, daemonUsage, map[int]daemonUsage) {
		k, err := usageOf(kpid)
		require.NoError(b, err)
		d, err := usageOf(tg.daemons...)
		require.NoError(b, err)
		return k, d, shimUsage(b, shimAddress)
	}
	k0, d0, s0 := usage()
	t1 := time.Now()
	time.Sleep(steady)
	k1, d1, s1 := usage()
	secs := time.Since(t1).Seconds()
	r.kubeletCPU, r.runtimeCPU = ms(k1.cpu-k0.cpu)/secs, ms(d1.cpu-d0.cpu)/secs
	r.kubeletRSS, r.runtimeRSS, r.runtimeAnon = k1.rss, d1.rss, d1.anon
	var shimCPU time.Duration
	for pid, a := range s1 {
		r.shimRSS, r.shimAnon = r.shimRSS+a.rss, r.shimAnon+a.anon
		if bf, ok := s0[pid]; ok {
			shimCPU += a.cpu - bf.cpu
			r.shims++
		}
	}
	r.shimCPU = ms(shimCPU) / secs

	text, err = c.Kubelet.Get("/metrics")
	require.NoError(b, err)
	r.metrics, err = parseHistograms(string(text), "kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_duration_seconds", "kubelet_runtime_operations_duration_seconds")
	require.NoError(b, err)

	t2 := time.Now()
	out, err := c.Kubectl(b, "delete", "deployment", "density", "--wait=false")
	require.NoError(b, err, out)
	c.WaitFor(b, time.Duration(n)*time.Second+3*time.Minute, "no density pod left", func() error {
		out, err := c.Kubectl(b, "get", "pods", "-l", "app=density", "-o", "name")
		if err != nil {
			return err
		}
		if left := len(strings.Fields(out)); left > 0 {
			return fmt.Errorf("%d pods left", left)
		}
		return nil
	})
	r.deleteAll = time.Since(t2)
	if dir := os.Getenv("BENCH_DENSITY_LOG_DIR"); dir != "" {
		klog, err := os.ReadFile(c.Kubelet.LogPath)
		require.NoError(b, err)
		require.NoError(b, os.MkdirAll(dir, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(dir, "kubelet-"+tg.name+".log"), klog, 0o644))
	}
	return r
}

type namedRunq struct {
	name string
	runq
}

// client-go's histograms in the kubelet's metrics.
const (
	clientLimiter = "rest_client_rate_limiter_duration_seconds"
	clientLatency = "rest_client_request_duration_seconds"
	// The status manager's time from a pod's status change to its write.
	statusSync = "kubelet_pod_status_sync_duration_seconds"
)

// shimdHandlerTimes reads shimd's own call latencies from its metrics socket.
func shimdHandlerTimes(b *testing.B, sock string) map[string]histogram {
	resp, err := harness.UnixHTTPClient(sock, 30*time.Second).Get("http://shimd/metrics")
	require.NoError(b, err, "BENCH_SHIMD_METRICS")
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(b, err, "BENCH_SHIMD_METRICS")
	h, err := parseHistograms(string(text), "shimd_rpc_duration_seconds")
	require.NoError(b, err, "BENCH_SHIMD_METRICS")
	return h
}

// densityDeployment is n busybox replicas that exit on SIGTERM, each with an exec
// readiness probe every 10 s.
func densityDeployment(n int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: density, namespace: default}
spec:
  replicas: %d
  selector: {matchLabels: {app: density}}
  template:
    metadata: {labels: {app: density}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: c
        image: %s
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
        readinessProbe:
          exec: {command: ["true"]}
          periodSeconds: 10
`, n, benchBusybox)
}

// reportDensity prints the table.
func reportDensity(b *testing.B, n int, sh, cd *target, res map[*target]*densityResult) {
	rs, rc := res[sh], res[cd]
	fmt.Printf("\nkubelet density: %d pods of a Deployment on a one-node cluster (kubelet %s), exec readiness probe every 10 s; steady state %s (shimd: sandbox.pause = %s). "+
		"Percentiles come from the kubelet's histograms (interpolated in the bucket, as Prometheus' histogram_quantile) and name their samples.\n",
		n, kubelet.Version(), rs.steady, pauseMode())
	fmt.Println("The kubelets' API client at its defaults: kubeAPIQPS 50, kubeAPIBurst 100.")
	out := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "%-58s\tshimd\tcontainerd CRI\tratio\t\n", "")
	row := func(name string, s, c float64, unit string) {
		fmt.Fprintf(out, "%-58s\t%.2f %s\t%.2f %s\t%.2fx\t\n", name, s, unit, c, unit, s/c)
	}
	for _, name := range []string{"kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_duration_seconds"} {
		hs, hc := rs.metrics[name], rc.metrics[name]
		for _, q := range []float64{0.5, 0.99} {
			fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", fmt.Sprintf("%s p%.0f", strings.TrimPrefix(name, "kubelet_"), q*100),
				hs.cell(q), hc.cell(q), hs.quantile(q)/hc.quantile(q))
		}
	}
	var ops []string
	for key := range rs.metrics {
		if strings.HasPrefix(key, "kubelet_runtime_operations_duration_seconds{") {
			ops = append(ops, key)
		}
	}
	sort.Strings(ops)
	for _, key := range ops {
		hs, hc := rs.metrics[key], rc.metrics[key]
		op := strings.TrimSuffix(strings.TrimPrefix(key, "kubelet_runtime_operations_duration_seconds{operation_type="), "}")
		for _, q := range []float64{0.5, 0.99} {
			fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", fmt.Sprintf("runtime op %s p%.0f", op, q*100), hs.cell(q), hc.cell(q), hs.quantile(q)/hc.quantile(q))
		}
	}
	if rs.handler != nil {
		// The calls the kubelet timed above, as long as shimd's handler took
		// (its interceptor's histogram; the warm-up's calls included).
		for _, rpc := range []string{"RunPodSandbox", "PodSandboxStatus", "ImageStatus", "CreateContainer", "StartContainer", "ListPodSandbox", "ListContainers"} {
			h := rs.handler["shimd_rpc_duration_seconds{rpc="+rpc+"}"]
			for _, q := range []float64{0.5, 0.99} {
				fmt.Fprintf(out, "%-58s\t%s\t\t\t\n", fmt.Sprintf("in shimd's handler: %s p%.0f", rpc, q*100), h.cell(q))
			}
		}
	}
	fmt.Fprintf(out, "%-58s\t%d, %.1f s\t%d, %.1f s\t\t\n", "housekeepings over 1 s until all started, their time", rs.housekeeps, rs.housekeepTotal.Seconds(), rc.housekeeps, rc.housekeepTotal.Seconds())
	ss, sc := rs.client[statusSync], rc.client[statusSync]
	fmt.Fprintf(out, "%-58s\t%.0f\t%.0f\t\t\n", "status writes until all started", ss.count, sc.count)
	row("  from the status change to its write, mean", 1000*ss.sum/ss.count, 1000*sc.sum/sc.count, "ms")
	for _, q := range []float64{0.5, 0.99} {
		fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", fmt.Sprintf("  from the status change to its write p%.0f", q*100), ss.cell(q), sc.cell(q), ss.quantile(q)/sc.quantile(q))
	}
	// The kubelet's requests to the API server until every pod had started: how
	// long each verb waited for the client's rate limiter, in all and per request.
	for _, verb := range []string{"GET", "PATCH", "POST", "PUT"} {
		ls, lc := rs.client[clientLimiter+"{verb="+verb+"}"], rc.client[clientLimiter+"{verb="+verb+"}"]
		if ls.count == 0 && lc.count == 0 {
			continue
		}
		fmt.Fprintf(out, "%-58s\t%.0f\t%.0f\t\t\n", "kubelet API requests until all started: "+verb, ls.count, lc.count)
		row("  their waits in the client's rate limiter, summed", ls.sum, lc.sum, "s")
		for _, q := range []float64{0.5, 0.99} {
			fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", fmt.Sprintf("  rate-limiter wait p%.0f", q*100), ls.cell(q), lc.cell(q), ls.quantile(q)/lc.quantile(q))
		}
		hs, hc := rs.client[clientLatency+"{verb="+verb+"}"], rc.client[clientLatency+"{verb="+verb+"}"]
		fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", "  request latency p50", hs.cell(0.5), hc.cell(0.5), hs.quantile(0.5)/hc.quantile(0.5))
	}
	// pctRow prints the p-th percentile of each side's samples and their ratio.
	pctRow := func(label string, s, c []time.Duration, p float64) {
		fmt.Fprintf(out, "%-58s\t%s\t%s\t%.2fx\t\n", fmt.Sprintf("%s p%.0f", label, p), pctCell(s, p), pctCell(c, p), ms(percentile(s, p))/ms(percentile(c, p)))
	}
	names := append(sliPhaseNames[:2:2], phaseBind, phaseDeliver)
	for _, name := range append(names, sliPhaseNames[2:]...) {
		label := "SLI part: " + name
		if name == phaseSLI {
			label = name
		}
		for _, p := range []float64{50, 99} {
			pctRow(label, rs.phases[name], rc.phases[name], p)
		}
	}
	if rs.loopOK && rc.loopOK {
		ls, lc := rs.loop, rc.loop
		for _, p := range []float64{50, 99} {
			pctRow("sync loop: received → SyncLoop ADD", ls.received, lc.received, p)
		}
		row("  the arrival window, first receipt → last ADD", ls.window.Seconds(), lc.window.Seconds(), "s")
		row("  in it, the loop in HandlePodAdditions, summed", ls.addingSum().Seconds(), lc.addingSum().Seconds(), "s")
		pctRow("  HandlePodAdditions per ADD", ls.adding, lc.adding, 50)
		row("  in it, housekeeping", ls.housekeeping.Seconds(), lc.housekeeping.Seconds(), "s")
		fmt.Fprintf(out, "%-58s\t%d / %d\t%d / %d\t\t\n", "  in it, PLEG events / probe results handled", ls.pleg, ls.probes, lc.pleg, lc.probes)
	}
	row(fmt.Sprintf("all %d replicas ready, from apply", n), rs.startAll.Seconds(), rc.startAll.Seconds(), "s")
	for _, m := range []struct {
		name string
		s, c time.Duration
	}{{"user", rs.startMachine.user, rc.startMachine.user}, {"system", rs.startMachine.system, rc.startMachine.system},
		{"iowait", rs.startMachine.iowait, rc.startMachine.iowait}, {"steal", rs.startMachine.steal, rc.startMachine.steal}} {
		row("  the machine's CPU meanwhile: "+m.name, m.s.Seconds(), m.c.Seconds(), "s")
	}
	for i := range rs.startRunq {
		s, c := rs.startRunq[i], rc.startRunq[i]
		row("  "+s.name+": CPU of its live threads", s.cpu.Seconds(), c.cpu.Seconds(), "s")
		row("  "+s.name+": waiting for a CPU, its live threads' sum", s.wait.Seconds(), c.wait.Seconds(), "s")
	}
	row("steady CPU: kubelet", rs.kubeletCPU, rc.kubeletCPU, "ms/s")
	row("steady CPU: runtime daemons", rs.runtimeCPU, rc.runtimeCPU, "ms/s")
	row(fmt.Sprintf("steady CPU: shims (%d and %d)", rs.shims, rc.shims), rs.shimCPU, rc.shimCPU, "ms/s")
	row("steady CPU: kubelet + runtime + shims", rs.kubeletCPU+rs.runtimeCPU+rs.shimCPU, rc.kubeletCPU+rc.runtimeCPU+rc.shimCPU, "ms/s")
	row("RSS: kubelet", mib(rs.kubeletRSS), mib(rc.kubeletRSS), "MiB")
	row("RSS: runtime daemons", mib(rs.runtimeRSS), mib(rc.runtimeRSS), "MiB")
	fmt.Fprintf(out, "%-58s\t%.1f MiB\t%.1f MiB\t\t\n", "anonymous: runtime daemons", mib(rs.runtimeAnon), mib(rc.runtimeAnon))
	row("RSS: shims", mib(rs.shimRSS), mib(rc.shimRSS), "MiB")
	row("anonymous: shims", mib(rs.shimAnon), mib(rc.shimAnon), "MiB")
	row("RSS: kubelet + runtime + shims", mib(rs.kubeletRSS+rs.runtimeRSS+rs.shimRSS), mib(rc.kubeletRSS+rc.runtimeRSS+rc.shimRSS), "MiB")
	row(fmt.Sprintf("delete all %d, until none in the API", n), rs.deleteAll.Seconds(), rc.deleteAll.Seconds(), "s")
	require.NoError(b, out.Flush())
	for _, m := range []struct {
		name string
		s, c float64
	}{
		{"sli-p50", rs.metrics["kubelet_pod_start_sli_duration_seconds"].quantile(0.5), rc.metrics["kubelet_pod_start_sli_duration_seconds"].quantile(0.5)},
		{"sli-p99", rs.metrics["kubelet_pod_start_sli_duration_seconds"].quantile(0.99), rc.metrics["kubelet_pod_start_sli_duration_seconds"].quantile(0.99)},
		{"steady-cpu", rs.kubeletCPU + rs.runtimeCPU + rs.shimCPU, rc.kubeletCPU + rc.runtimeCPU + rc.shimCPU},
	} {
		b.ReportMetric(m.s/m.c, m.name+"-ratio")
	}
}
