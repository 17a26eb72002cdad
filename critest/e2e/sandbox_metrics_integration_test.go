//go:build integration

package e2e

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// criMetric is one value of ListPodSandboxMetrics with its labels by key.
type criMetric struct {
	value  uint64
	labels map[string]string
}

// podSandboxMetrics indexes the metrics of one pod: pod-level ones under "", a
// container's under its id; each by metric name.
func podSandboxMetrics(t *testing.T, descs map[string][]string, pm *runtimeapi.PodSandboxMetrics) map[string]map[string][]criMetric {
	t.Helper()
	out := map[string]map[string][]criMetric{}
	add := func(owner string, ms []*runtimeapi.Metric) {
		out[owner] = map[string][]criMetric{}
		for _, m := range ms {
			keys, ok := descs[m.Name]
			require.True(t, ok, "metric %s has no descriptor", m.Name)
			require.Len(t, m.LabelValues, len(keys), "labels of %s", m.Name)
			labels := map[string]string{}
			for i, k := range keys {
				labels[k] = m.LabelValues[i]
			}
			out[owner][m.Name] = append(out[owner][m.Name], criMetric{value: m.Value.GetValue(), labels: labels})
		}
	}
	add("", pm.Metrics)
	for _, cm := range pm.ContainerMetrics {
		add(cm.ContainerId, cm.Metrics)
	}
	return out
}

// The CRI metrics RPCs: descriptors with cAdvisor's names and label keys; per ready
// pod its network counters (which grow with a ping between two pods) and per running
// container CPU (a busy loop passes one second), memory, processes, writable layer
// and limits, labelled pod, namespace, container, id and image. The stream sends the
// same. A stopped container and a stopped pod report nothing.
func TestCRIPodSandboxMetrics(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)

	dr, err := rs.ListMetricDescriptors(ctxT(t, time.Minute), &runtimeapi.ListMetricDescriptorsRequest{})
	require.NoError(t, err)
	descs := map[string][]string{}
	for _, d := range dr.Descriptors {
		require.NotEmpty(t, d.Help, d.Name)
		descs[d.Name] = d.LabelKeys
	}
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
		"container_network_receive_bytes_total", "container_network_transmit_bytes_total", "container_fs_usage_bytes",
		"container_processes", "container_start_time_seconds", "container_spec_memory_limit_bytes"} {
		require.Contains(t, descs, name)
		require.Equal(t, []string{"pod", "namespace", "container", "id", "image"}, descs[name][:5], name)
	}
	require.Equal(t, "interface", descs["container_network_receive_bytes_total"][5])

	p := newPod(t, rs, "metrics")
	other := newPod(t, rs, "metrics-peer")
	busy := p.container("busy", "sh", "-c", "while :; do :; done")
	busy.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuPeriod: 100000, CpuQuota: 100000}
	busyID := p.run(busy)
	// idle holds a listening socket (nc) beside its shell's stdio.
	idle := p.run(p.container("idle", "sh", "-c", "nc -l -p 8080 & exec sleep 3600"))
	out, err := execSync(t, rs, idle, 30, "ping", "-c", "3", "-W", "1", podStatus(t, rs, other.id).Network.Ip)
	require.NoError(t, err)
	require.Equal(t, int32(0), out.ExitCode, "ping: %s %s", out.Stdout, out.Stderr)

	var mine map[string]map[string][]criMetric
	require.Eventually(t, func() bool {
		resp, err := rs.ListPodSandboxMetrics(ctxT(t, time.Minute), &runtimeapi.ListPodSandboxMetricsRequest{})
		require.NoError(t, err)
		require.Len(t, resp.PodMetrics, 2)
		for _, pm := range resp.PodMetrics {
			if pm.PodSandboxId == p.id {
				mine = podSandboxMetrics(t, descs, pm)
			}
		}
		cpu := mine[busyID]["container_cpu_usage_seconds_total"]
		sockets := mine[idle]["container_sockets"]
		return len(cpu) == 1 && cpu[0].value >= 1 && len(sockets) == 1 && sockets[0].value == 1
	}, time.Minute, 500*time.Millisecond, "the busy container never reached one CPU second (%v), or the idle one never had its listening socket (%v)",
		mine[busyID]["container_cpu_usage_seconds_total"], mine[idle]["container_sockets"])

	pod := mine[""]
	require.Len(t, pod["container_network_receive_bytes_total"], 1, "one interface besides lo")
	rx := pod["container_network_receive_bytes_total"][0]
	require.Equal(t, map[string]string{"pod": "metrics", "namespace": "e2e", "container": "", "id": p.id, "image": "", "interface": "eth0"}, rx.labels)
	require.Greater(t, rx.value, uint64(3*84), "three pings' replies at least")
	require.GreaterOrEqual(t, pod["container_network_transmit_packets_total"][0].value, uint64(3))

	require.Len(t, mine, 3, "the pod and its two containers")
	c := mine[busyID]
	require.Equal(t, map[string]string{"pod": "metrics", "namespace": "e2e", "container": "busy", "id": busyID, "image": busyboxImage},
		c["container_memory_working_set_bytes"][0].labels)
	require.Greater(t, c["container_memory_usage_bytes"][0].value, uint64(0))
	require.Greater(t, c["container_memory_working_set_bytes"][0].value, uint64(0))
	require.Equal(t, uint64(1), c["container_processes"][0].value)
	require.Equal(t, uint64(64<<20), c["container_spec_memory_limit_bytes"][0].value)
	require.Equal(t, uint64(100000), c["container_spec_cpu_quota"][0].value)
	require.InDelta(t, time.Now().Unix(), int64(c["container_start_time_seconds"][0].value), 120)
	require.Len(t, c["container_fs_usage_bytes"], 1)
	device := c["container_fs_usage_bytes"][0].labels["device"]
	require.NotEmpty(t, device)
	// The writable layers' filesystem: its size and inodes, under the same device.
	for _, name := range []string{"container_fs_limit_bytes", "container_fs_inodes_total", "container_fs_inodes_free"} {
		require.Len(t, c[name], 1, name)
		require.Equal(t, device, c[name][0].labels["device"], name)
	}
	require.Greater(t, c["container_fs_limit_bytes"][0].value, c["container_fs_usage_bytes"][0].value)
	require.Greater(t, c["container_fs_inodes_total"][0].value, uint64(0))
	require.LessOrEqual(t, c["container_fs_inodes_free"][0].value, c["container_fs_inodes_total"][0].value)
	require.Len(t, c["container_memory_kernel_usage"], 1)
	// The busy shell holds its stdio and no socket; the idle one's nc listens.
	require.GreaterOrEqual(t, c["container_file_descriptors"][0].value, uint64(3))
	require.Equal(t, uint64(0), c["container_sockets"][0].value)
	require.Greater(t, mine[idle]["container_file_descriptors"][0].value, c["container_file_descriptors"][0].value)

	// The stream sends the same pods and containers.
	stream, err := rs.StreamPodSandboxMetrics(ctxT(t, time.Minute), &runtimeapi.StreamPodSandboxMetricsRequest{})
	require.NoError(t, err)
	streamed := map[string]int{}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		for _, pm := range msg.PodSandboxMetrics {
			streamed[pm.PodSandboxId] = len(pm.ContainerMetrics)
		}
	}
	require.Equal(t, map[string]int{p.id: 2, other.id: 0}, streamed)

	// crictl reads both RPCs.
	descOut, err := env.Shimd.Crictl(t, "metricdescs")
	require.NoError(t, err)
	require.Contains(t, descOut, "container_memory_working_set_bytes")
	podOut, err := env.Shimd.Crictl(t, "metricsp")
	require.NoError(t, err)
	require.Contains(t, podOut, p.id)
	require.Contains(t, podOut, "container_cpu_usage_seconds_total")

	// A stopped container and a stopped pod report nothing.
	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: busyID, Timeout: 1})
	require.NoError(t, err)
	_, err = rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: other.id})
	require.NoError(t, err)
	resp, err := rs.ListPodSandboxMetrics(ctxT(t, time.Minute), &runtimeapi.ListPodSandboxMetricsRequest{})
	require.NoError(t, err)
	require.Len(t, resp.PodMetrics, 1)
	require.Equal(t, p.id, resp.PodMetrics[0].PodSandboxId)
	require.Len(t, resp.PodMetrics[0].ContainerMetrics, 1)
	require.Equal(t, idle, resp.PodMetrics[0].ContainerMetrics[0].ContainerId)
	stopRemove(t, rs, p.id)
	stopRemove(t, rs, other.id)
}
