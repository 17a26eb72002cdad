package stats

import (
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
)

// byName indexes metrics by name and first extra label (interface, failure type).
func byName(ms []*runtimeapi.Metric) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range ms {
		key := m.Name
		if len(m.LabelValues) > len(baseMetricLabels) {
			key += "/" + m.LabelValues[len(baseMetricLabels)]
		}
		out[key] = m.Value.GetValue()
	}
	return out
}

// Every metric a pod or container reports has a descriptor, and as many label
// values as the descriptor has keys (else the kubelet drops it).
func requireDescribed(t *testing.T, ms []*runtimeapi.Metric) {
	t.Helper()
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range Descriptors() {
		require.NotContains(t, descs, d.Name, "descriptor listed twice")
		descs[d.Name] = d
	}
	for _, m := range ms {
		d, ok := descs[m.Name]
		require.True(t, ok, "metric %s has no descriptor", m.Name)
		require.Len(t, m.LabelValues, len(d.LabelKeys), "metric %s", m.Name)
		require.Equal(t, []string{"pod", "namespace", "container", "id", "image"}, d.LabelKeys[:5])
	}
}

func TestCgroupMetrics(t *testing.T) {
	tests := []struct {
		name string
		data any
		want map[string]uint64
	}{
		{name: "cgroup v1", data: &v1.Metrics{
			CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 3_500_000_000, User: 2_100_000_000, Kernel: 1_000_000_000},
				Throttling: &v1.Throttle{Periods: 10, ThrottledPeriods: 4, ThrottledTime: 2_000_000_000}},
			Memory: &v1.MemoryStat{TotalCache: 100, TotalRSS: 200, TotalMappedFile: 30, TotalInactiveFile: 40, TotalActiveFile: 50,
				TotalPgFault: 7, TotalPgMajFault: 2,
				Usage: &v1.MemoryEntry{Usage: 1000, Max: 1500, Failcnt: 3}, Swap: &v1.MemoryEntry{Usage: 1200}},
			MemoryOomControl: &v1.MemoryOomControl{OomKill: 1},
			Pids:             &v1.PidsStat{Current: 5, Limit: 100},
		}, want: map[string]uint64{
			"container_cpu_usage_seconds_total": 3, "container_cpu_user_seconds_total": 2, "container_cpu_system_seconds_total": 1,
			"container_cpu_cfs_periods_total": 10, "container_cpu_cfs_throttled_periods_total": 4, "container_cpu_cfs_throttled_seconds_total": 2,
			"container_memory_cache": 100, "container_memory_rss": 200, "container_memory_mapped_file": 30, "container_memory_swap": 200,
			"container_memory_failcnt": 3, "container_memory_usage_bytes": 1000, "container_memory_max_usage_bytes": 1500,
			"container_memory_working_set_bytes": 960, "container_memory_total_active_file_bytes": 50, "container_memory_total_inactive_file_bytes": 40,
			"container_memory_failures_total/pgfault": 7, "container_memory_failures_total/pgmajfault": 2,
			"container_oom_events_total": 1, "container_processes": 5, "container_threads_max": 100,
		}},
		{name: "cgroup v2", data: &v2.Metrics{
			CPU:          &v2.CPUStat{UsageUsec: 2_500_000, UserUsec: 1_000_000, SystemUsec: 1_500_000, NrPeriods: 6, NrThrottled: 1, ThrottledUsec: 100},
			Memory:       &v2.MemoryStat{Usage: 900, MaxUsage: 950, Anon: 300, File: 400, FileMapped: 20, InactiveFile: 1000, ActiveFile: 5, SwapUsage: 8, Pgfault: 9, Pgmajfault: 1},
			MemoryEvents: &v2.MemoryEvents{OomKill: 2},
			Pids:         &v2.PidsStat{Current: 3},
		}, want: map[string]uint64{
			"container_cpu_usage_seconds_total": 2, "container_cpu_user_seconds_total": 1, "container_cpu_system_seconds_total": 1,
			"container_cpu_cfs_periods_total": 6, "container_cpu_cfs_throttled_periods_total": 1, "container_cpu_cfs_throttled_seconds_total": 0,
			"container_memory_cache": 400, "container_memory_rss": 300, "container_memory_mapped_file": 20, "container_memory_swap": 8,
			"container_memory_usage_bytes": 900, "container_memory_max_usage_bytes": 950,
			"container_memory_working_set_bytes": 0, "container_memory_total_active_file_bytes": 5, "container_memory_total_inactive_file_bytes": 1000,
			"container_memory_failures_total/pgfault": 9, "container_memory_failures_total/pgmajfault": 1,
			"container_oom_events_total": 2, "container_processes": 3, "container_threads_max": 0,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metricSet{labels: []string{"pod", "ns", "ctr", "id", "img"}}
			cgroupMetrics(&m, tt.data)
			requireDescribed(t, m.out)
			require.Equal(t, tt.want, byName(m.out))
			for _, x := range m.out {
				require.Equal(t, []string{"pod", "ns", "ctr", "id", "img"}, x.LabelValues[:5])
				require.Zero(t, x.Timestamp, "gathered live")
			}
		})
	}
}

func TestNetworkAndSpecMetrics(t *testing.T) {
	m := metricSet{labels: []string{"pod", "ns", "", "sandbox-id", ""}}
	networkMetrics(&m, network.InterfaceStats{Name: "eth0", RxBytes: 1, RxPackets: 2, RxDropped: 3, RxErrors: 4, TxBytes: 5, TxPackets: 6, TxDropped: 7, TxErrors: 8})
	specMetrics(&m, &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 1 << 20})
	requireDescribed(t, m.out)
	require.Equal(t, map[string]uint64{
		"container_network_receive_bytes_total/eth0": 1, "container_network_receive_packets_total/eth0": 2,
		"container_network_receive_packets_dropped_total/eth0": 3, "container_network_receive_errors_total/eth0": 4,
		"container_network_transmit_bytes_total/eth0": 5, "container_network_transmit_packets_total/eth0": 6,
		"container_network_transmit_packets_dropped_total/eth0": 7, "container_network_transmit_errors_total/eth0": 8,
		"container_spec_cpu_period": 100000, "container_spec_cpu_quota": 50000, "container_spec_cpu_shares": 512,
		"container_spec_memory_limit_bytes": 1 << 20,
	}, byName(m.out))
}
