package stats

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
)

// byName indexes metrics by name and extra labels (interface, failure type and
// scope, device, ...), joined by "/".
func byName(ms []*runtimeapi.Metric) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range ms {
		key := m.Name
		if len(m.LabelValues) > len(baseMetricLabels) {
			key += "/" + strings.Join(m.LabelValues[len(baseMetricLabels):], "/")
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

// fakeDev names block devices as hostFS.blockDevice does where /sys has no name.
func fakeDev(major, minor uint64) string { return fmt.Sprintf("%d:%d", major, minor) }

func TestCgroupMetrics(t *testing.T) {
	psi := func(some, full uint64) *v2.PSIStats {
		return &v2.PSIStats{Some: &v2.PSIData{Total: some, Avg10: 1.5}, Full: &v2.PSIData{Total: full}}
	}
	tests := []struct {
		name string
		tm   taskMetrics
		want map[string]uint64
	}{
		{name: "cgroup v1", tm: taskMetrics{data: &v1.Metrics{
			CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 3_500_000_000, User: 2_100_000_000, Kernel: 1_000_000_000},
				Throttling: &v1.Throttle{Periods: 10, ThrottledPeriods: 4, ThrottledTime: 2_000_000_000}},
			Memory: &v1.MemoryStat{TotalCache: 100, TotalRSS: 200, TotalMappedFile: 30, TotalInactiveFile: 40, TotalActiveFile: 50,
				TotalPgFault: 7, TotalPgMajFault: 2,
				Usage: &v1.MemoryEntry{Usage: 1000, Max: 1500, Failcnt: 3, Limit: 1 << 63}, Swap: &v1.MemoryEntry{Usage: 1200, Limit: 1 << 63},
				Kernel: &v1.MemoryEntry{Usage: 77}},
			MemoryOomControl: &v1.MemoryOomControl{OomKill: 1},
			Pids:             &v1.PidsStat{Current: 5, Limit: 100},
			Blkio: &v1.BlkIOStat{
				IoServiceBytesRecursive: []*v1.BlkIOEntry{
					{Device: "/dev/vda", Major: 254, Op: "Read", Value: 4096}, {Device: "/dev/vda", Major: 254, Op: "Write", Value: 8192},
					{Device: "/dev/vda", Major: 254, Op: "Total", Value: 12288},
				},
				IoServicedRecursive: []*v1.BlkIOEntry{
					{Device: "/dev/vda", Major: 254, Op: "Read", Value: 1}, {Device: "/dev/vda", Major: 254, Op: "Write", Value: 2},
					{Device: "/dev/vda", Major: 254, Op: "Sync", Value: 3},
				},
			},
		}, psi: psiSet{cpu: psi(2_500_000, 1_000_000), memory: psi(0, 0), io: psi(3_000_000, 0)}},
			want: map[string]uint64{
				"container_cpu_usage_seconds_total": 3, "container_cpu_user_seconds_total": 2, "container_cpu_system_seconds_total": 1,
				"container_cpu_cfs_periods_total": 10, "container_cpu_cfs_throttled_periods_total": 4, "container_cpu_cfs_throttled_seconds_total": 2,
				"container_memory_cache": 100, "container_memory_rss": 200, "container_memory_mapped_file": 30, "container_memory_swap": 200,
				"container_memory_failcnt": 3, "container_memory_usage_bytes": 1000, "container_memory_max_usage_bytes": 1500,
				"container_memory_working_set_bytes": 960, "container_memory_total_active_file_bytes": 50, "container_memory_total_inactive_file_bytes": 40,
				"container_memory_failures_total/pgfault/container": 7, "container_memory_failures_total/pgmajfault/container": 2,
				"container_oom_events_total": 1, "container_processes": 5, "container_threads": 5, "container_threads_max": 100,
				"container_fs_reads_bytes_total//dev/vda": 4096, "container_fs_writes_bytes_total//dev/vda": 8192,
				"container_fs_reads_total//dev/vda": 1, "container_fs_writes_total//dev/vda": 2,
				"container_blkio_device_usage_total//dev/vda/254/0/Read": 4096, "container_blkio_device_usage_total//dev/vda/254/0/Write": 8192,
				"container_blkio_device_usage_total//dev/vda/254/0/Total": 12288, "container_memory_kernel_usage": 77,
				"container_pressure_cpu_waiting_seconds_total": 2, "container_pressure_cpu_stalled_seconds_total": 1,
				"container_pressure_memory_waiting_seconds_total": 0, "container_pressure_memory_stalled_seconds_total": 0,
				"container_pressure_io_waiting_seconds_total": 3, "container_pressure_io_stalled_seconds_total": 0,
			}},
		// No memsw files (the shim leaves the swap entry zero), no pids controller, no
		// block I/O, no PSI: none of them is reported.
		{name: "cgroup v1 without swap accounting, pids or PSI", tm: taskMetrics{data: &v1.Metrics{
			CPU:    &v1.CPUStat{Usage: &v1.CPUUsage{Total: 1_000_000_000}},
			Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: 1000, Max: 1000}, Swap: &v1.MemoryEntry{}},
			Blkio:  &v1.BlkIOStat{},
		}}, want: map[string]uint64{
			"container_cpu_usage_seconds_total": 1, "container_cpu_user_seconds_total": 0, "container_cpu_system_seconds_total": 0,
			"container_cpu_cfs_periods_total": 0, "container_cpu_cfs_throttled_periods_total": 0, "container_cpu_cfs_throttled_seconds_total": 0,
			"container_memory_cache": 0, "container_memory_rss": 0, "container_memory_mapped_file": 0,
			"container_memory_failcnt": 0, "container_memory_usage_bytes": 1000, "container_memory_max_usage_bytes": 1000,
			"container_memory_working_set_bytes": 1000, "container_memory_total_active_file_bytes": 0, "container_memory_total_inactive_file_bytes": 0,
			"container_memory_failures_total/pgfault/container": 0, "container_memory_failures_total/pgmajfault/container": 0, "container_oom_events_total": 0,
		}},
		{name: "cgroup v2", tm: taskMetrics{data: &v2.Metrics{
			CPU: &v2.CPUStat{UsageUsec: 2_500_000, UserUsec: 1_000_000, SystemUsec: 1_500_000, NrPeriods: 6, NrThrottled: 1, ThrottledUsec: 100,
				PSI: psi(4_000_000, 2_000_000)},
			Memory: &v2.MemoryStat{Usage: 900, MaxUsage: 950, Anon: 300, File: 400, FileMapped: 20, InactiveFile: 1000, ActiveFile: 5, KernelStack: 16,
				SwapUsage: 8, SwapLimit: 1<<64 - 1, Pgfault: 9, Pgmajfault: 1, PSI: psi(7_000_000, 6_000_000)},
			MemoryEvents: &v2.MemoryEvents{OomKill: 2},
			Pids:         &v2.PidsStat{Current: 3, Limit: 1<<64 - 1},
			Io: &v2.IOStat{Usage: []*v2.IOEntry{{Major: 8, Minor: 0, Rbytes: 100, Wbytes: 200, Rios: 3, Wios: 4}},
				PSI: psi(9_000_000, 8_000_000)},
		}, swapFile: true, kernel: ptr(uint64(4096))}, want: map[string]uint64{
			"container_cpu_usage_seconds_total": 2, "container_cpu_user_seconds_total": 1, "container_cpu_system_seconds_total": 1,
			"container_cpu_cfs_periods_total": 6, "container_cpu_cfs_throttled_periods_total": 1, "container_cpu_cfs_throttled_seconds_total": 0,
			"container_memory_cache": 400, "container_memory_rss": 300, "container_memory_mapped_file": 20, "container_memory_swap": 8,
			"container_memory_usage_bytes": 900, "container_memory_max_usage_bytes": 950,
			"container_memory_working_set_bytes": 0, "container_memory_total_active_file_bytes": 5, "container_memory_total_inactive_file_bytes": 1000,
			"container_memory_failures_total/pgfault/container": 9, "container_memory_failures_total/pgmajfault/container": 1,
			"container_oom_events_total": 2, "container_processes": 3, "container_threads": 3, "container_threads_max": 0,
			"container_fs_reads_bytes_total/8:0": 100, "container_fs_writes_bytes_total/8:0": 200,
			"container_fs_reads_total/8:0": 3, "container_fs_writes_total/8:0": 4,
			"container_blkio_device_usage_total/8:0/8/0/Read": 100, "container_blkio_device_usage_total/8:0/8/0/Write": 200,
			"container_memory_kernel_usage":                4096,
			"container_pressure_cpu_waiting_seconds_total": 4, "container_pressure_cpu_stalled_seconds_total": 2,
			"container_pressure_memory_waiting_seconds_total": 7, "container_pressure_memory_stalled_seconds_total": 6,
			"container_pressure_io_waiting_seconds_total": 9, "container_pressure_io_stalled_seconds_total": 8,
		}},
		// No memory.swap.current, no pids.current, no io.stat, no pressure files.
		{name: "cgroup v2 without swap accounting, pids, io or PSI", tm: taskMetrics{data: &v2.Metrics{
			CPU:    &v2.CPUStat{UsageUsec: 1_000_000},
			Memory: &v2.MemoryStat{Usage: 900, KernelStack: 32},
			Pids:   &v2.PidsStat{},
			Io:     &v2.IOStat{},
		}}, want: map[string]uint64{
			"container_cpu_usage_seconds_total": 1, "container_cpu_user_seconds_total": 0, "container_cpu_system_seconds_total": 0,
			"container_cpu_cfs_periods_total": 0, "container_cpu_cfs_throttled_periods_total": 0, "container_cpu_cfs_throttled_seconds_total": 0,
			"container_memory_cache": 0, "container_memory_rss": 0, "container_memory_mapped_file": 0,
			"container_memory_usage_bytes": 900, "container_memory_working_set_bytes": 900,
			"container_memory_total_active_file_bytes": 0, "container_memory_total_inactive_file_bytes": 0,
			"container_memory_failures_total/pgfault/container": 0, "container_memory_failures_total/pgmajfault/container": 0, "container_oom_events_total": 0,
			"container_memory_kernel_usage": 32, // no "kernel" in memory.stat (before Linux 5.18): kernel_stack, as containerd
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metricSet{labels: []string{"pod", "ns", "ctr", "id", "img"}}
			cgroupMetrics(&m, tt.tm, fakeDev)
			requireDescribed(t, m.out)
			require.Equal(t, tt.want, byName(m.out))
			for _, x := range m.out {
				require.Equal(t, []string{"pod", "ns", "ctr", "id", "img"}, x.LabelValues[:5])
				require.Zero(t, x.Timestamp, "gathered live")
			}
		})
	}
}

// A pod's own metrics: its network counters and its cgroup's pressure.
func TestPodPressureMetrics(t *testing.T) {
	m := metricSet{labels: []string{"pod", "ns", "", "sandbox-id", ""}}
	pressureMetrics(&m, psiSet{cpu: &v2.PSIStats{Some: &v2.PSIData{Total: 5_500_000}}})
	requireDescribed(t, m.out)
	require.Equal(t, map[string]uint64{"container_pressure_cpu_waiting_seconds_total": 5}, byName(m.out),
		"a pressure file with only a some line (the root's cpu.pressure before Linux 5.13) has no stalled counter")
	m.out = nil
	pressureMetrics(&m, psiSet{})
	require.Empty(t, m.out)
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

func ptr[T any](v T) *T { return &v }
