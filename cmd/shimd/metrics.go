package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/image"
)

// metrics holds shimd's Prometheus metrics in a private registry. Everything shimd
// already keeps (pods, containers, containerd's state) is read at scrape time by
// collectors; only events (RPCs, pulls, CNI calls, recovery) are counted here.
type metrics struct {
	reg *prometheus.Registry

	rpcDuration  *prometheus.HistogramVec
	rpcRequests  *prometheus.CounterVec
	inFlight     prometheus.Gauge
	pulls        *prometheus.CounterVec
	pullBytes    prometheus.Counter
	pullDuration prometheus.Histogram
	cniDuration  *prometheus.HistogramVec
	cniFailures  *prometheus.CounterVec
	recovery     prometheus.Gauge
}

// newMetrics registers shimd's metrics and the Go runtime and process collectors.
func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shimd_rpc_duration_seconds", Help: "Latency of CRI RPCs, by RPC name.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"rpc"}),
		rpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shimd_rpc_requests_total", Help: "CRI RPCs answered, by RPC name and gRPC code (OK or the error's code).",
		}, []string{"rpc", "code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shimd_rpc_in_flight", Help: "CRI RPCs being served now (streams included).",
		}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shimd_image_pulls_total", Help: "Image pulls that ran (shared concurrent pulls count once), by result (success, failure).",
		}, []string{"result"}),
		pullBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shimd_image_pull_bytes_total", Help: "Bytes received from registries by image pulls.",
		}),
		pullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shimd_image_pull_duration_seconds", Help: "Duration of image pulls, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		cniDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shimd_cni_duration_seconds", Help: "Latency of CNI ADD and DEL, by op (add, del).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"op"}),
		cniFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shimd_cni_failures_total", Help: "CNI ADD and DEL calls that failed, by op (add, del).",
		}, []string{"op"}),
		recovery: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shimd_recovery_duration_seconds", Help: "How long the last successful recovery at start took.",
		}),
	}
	m.reg.MustRegister(m.rpcDuration, m.rpcRequests, m.inFlight, m.pulls, m.pullBytes, m.pullDuration,
		m.cniDuration, m.cniFailures, m.recovery,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "shimd"}))
	return m
}

// watchCleanups exports the cleanup queue's state.
func (m *metrics) watchCleanups(q *cleanup.Queue) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shimd_cleanups_pending", Help: "Cleanups that failed, and task states recovery could not read, waiting for their next retry.",
		}, func() float64 { return float64(len(q.Pending())) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shimd_cleanups_retried_total", Help: "Failed cleanups and unread task states that a retry completed.",
		}, func() float64 { return float64(q.Retried()) }))
}

// observeRPC records one answered RPC.
func (m *metrics) observeRPC(rpc string, code codes.Code, d time.Duration) {
	m.rpcDuration.WithLabelValues(rpc).Observe(d.Seconds())
	m.rpcRequests.WithLabelValues(rpc, code.String()).Inc()
}

// observePull is image.Options.PullObserver.
func (m *metrics) observePull(s image.PullStats) {
	result := "success"
	if s.Err != nil {
		result = "failure"
	}
	m.pulls.WithLabelValues(result).Inc()
	m.pullBytes.Add(float64(s.Bytes))
	m.pullDuration.Observe(s.Duration.Seconds())
}

// observeCNI is network.Options.Observer.
func (m *metrics) observeCNI(op string, d time.Duration, err error) {
	m.cniDuration.WithLabelValues(op).Observe(d.Seconds())
	m.cniFailures.WithLabelValues(op) // present at zero once an op ran
	if err != nil {
		m.cniFailures.WithLabelValues(op).Inc()
	}
}

// startMetrics serves the registry's metrics at /metrics on addr (IP:port or an
// absolute unix socket path, mode 0600) until stop is called; "" serves nothing.
func startMetrics(ctx context.Context, addr string, m *metrics) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError}))
	return serveHTTP(ctx, "metrics.address", addr, mux)
}

// stateLister is what the state collector reads at scrape time.
type stateLister interface {
	ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error)
}

// stateCollector reports pods and containers by state from the runtime's own stores,
// and whether containerd answers, at scrape time: no copy of that state is kept.
type stateCollector struct {
	lister     stateLister
	containerd func(context.Context) (bool, error)
	pods       *prometheus.Desc
	containers *prometheus.Desc
	up         *prometheus.Desc
}

func newStateCollector(l stateLister, containerd func(context.Context) (bool, error)) *stateCollector {
	return &stateCollector{
		lister: l, containerd: containerd,
		pods:       prometheus.NewDesc("shimd_pods", "Pod sandboxes by state (SANDBOX_READY, SANDBOX_NOTREADY).", []string{"state"}, nil),
		containers: prometheus.NewDesc("shimd_containers", "Containers by state (CONTAINER_CREATED, _RUNNING, _EXITED, _UNKNOWN).", []string{"state"}, nil),
		up:         prometheus.NewDesc("shimd_containerd_up", "1 if containerd answers, 0 if not.", nil, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pods
	ch <- c.containers
	ch <- c.up
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up := 0.0
	if ok, _ := c.containerd(ctx); ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	pods := map[string]float64{}
	for _, s := range runtimeapi.PodSandboxState_name {
		pods[s] = 0
	}
	if resp, err := c.lister.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
		for _, p := range resp.Items {
			pods[p.State.String()]++
		}
	} else {
		ch <- prometheus.NewInvalidMetric(c.pods, err)
	}
	for s, n := range pods {
		ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, n, s)
	}
	ctrs := map[string]float64{}
	for _, s := range runtimeapi.ContainerState_name {
		ctrs[s] = 0
	}
	if resp, err := c.lister.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err == nil {
		for _, ct := range resp.Containers {
			ctrs[ct.State.String()]++
		}
	} else {
		ch <- prometheus.NewInvalidMetric(c.containers, err)
	}
	for s, n := range ctrs {
		ch <- prometheus.MustNewConstMetric(c.containers, prometheus.GaugeValue, n, s)
	}
}
