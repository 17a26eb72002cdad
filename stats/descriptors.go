package stats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI metrics RPCs (the kubelet's PodAndContainerStatsFromCRI feature) carry
// cAdvisor's metrics: the kubelet reads the descriptors once, when it starts, and
// serves every metric ListPodSandboxMetrics returns under /metrics/cadvisor with the
// descriptor's name, help and label keys. The names and labels are cAdvisor's, as
// containerd 2.x reports them: every metric has the labels pod, namespace, container,
// id and image (a pod-level metric has container and image "" and the pod's id);
// network metrics add interface, filesystem metrics (usage, capacity and I/O) device,
// container_blkio_device_usage_total also major, minor and operation. The
// pressure metrics (container_pressure_*) are the kubelet's KubeletPSI ones.

var (
	baseMetricLabels    = []string{"pod", "namespace", "container", "id", "image"}
	networkMetricLabels = append(append([]string(nil), baseMetricLabels...), "interface")
	fsMetricLabels      = append(append([]string(nil), baseMetricLabels...), "device")
)

// metricDesc is a descriptor and the type of the metric's values.
type metricDesc struct {
	name, help string
	labels     []string
	typ        runtimeapi.MetricType
}

func counter(name, help string, labels []string) metricDesc {
	return metricDesc{name: name, help: help, labels: labels, typ: runtimeapi.MetricType_COUNTER}
}

func gauge(name, help string, labels []string) metricDesc {
	return metricDesc{name: name, help: help, labels: labels, typ: runtimeapi.MetricType_GAUGE}
}

// The metrics shimd reports; metricDescs lists them all.
var (
	mCPUUsage         = counter("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", baseMetricLabels)
	mCPUUser          = counter("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", baseMetricLabels)
	mCPUSystem        = counter("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", baseMetricLabels)
	mCPUPeriods       = counter("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", baseMetricLabels)
	mCPUThrottled     = counter("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", baseMetricLabels)
	mCPUThrottledSecs = counter("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", baseMetricLabels)
	mMemCache         = gauge("container_memory_cache", "Number of bytes of page cache memory.", baseMetricLabels)
	mMemRSS           = gauge("container_memory_rss", "Size of RSS in bytes.", baseMetricLabels)
	mMemMapped        = gauge("container_memory_mapped_file", "Size of memory mapped files in bytes.", baseMetricLabels)
	mMemSwap          = gauge("container_memory_swap", "Container swap usage in bytes.", baseMetricLabels)
	mMemFailcnt       = counter("container_memory_failcnt", "Number of memory usage hits limits.", baseMetricLabels)
	mMemUsage         = gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", baseMetricLabels)
	mMemMaxUsage      = gauge("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", baseMetricLabels)
	mMemWorkingSet    = gauge("container_memory_working_set_bytes", "Current working set in bytes.", baseMetricLabels)
	mMemActiveFile    = gauge("container_memory_total_active_file_bytes", "Current total active file in bytes.", baseMetricLabels)
	mMemInactiveFile  = gauge("container_memory_total_inactive_file_bytes", "Current total inactive file in bytes.", baseMetricLabels)
	mMemKernel        = gauge("container_memory_kernel_usage", "Size of kernel memory allocated to the container in bytes.", baseMetricLabels)
	mMemFailures      = counter("container_memory_failures_total", "Cumulative count of memory allocation failures.", append(append([]string(nil), baseMetricLabels...), "failure_type", "scope"))
	mOOMEvents        = counter("container_oom_events_total", "Count of out of memory events observed for the container", baseMetricLabels)
	mProcesses        = gauge("container_processes", "Number of processes running inside the container.", baseMetricLabels)
	mThreads          = gauge("container_threads", "Number of threads running inside the container", baseMetricLabels)
	mThreadsMax       = gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", baseMetricLabels)
	mFsReadBytes      = counter("container_fs_reads_bytes_total", "Cumulative count of bytes read", fsMetricLabels)
	mFsReads          = counter("container_fs_reads_total", "Cumulative count of reads completed", fsMetricLabels)
	mFsWriteBytes     = counter("container_fs_writes_bytes_total", "Cumulative count of bytes written", fsMetricLabels)
	mFsWrites         = counter("container_fs_writes_total", "Cumulative count of writes completed", fsMetricLabels)
	mFsUsage          = gauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", fsMetricLabels)
	mFsLimit          = gauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", fsMetricLabels)
	mFsInodesTotal    = gauge("container_fs_inodes_total", "Number of Inodes", fsMetricLabels)
	mFsInodesFree     = gauge("container_fs_inodes_free", "Number of available Inodes", fsMetricLabels)
	mBlkioDevice      = counter("container_blkio_device_usage_total", "Blkio device bytes usage", append(append([]string(nil), fsMetricLabels...), "major", "minor", "operation"))
	mFileDescriptors  = gauge("container_file_descriptors", "Number of open file descriptors for the container.", baseMetricLabels)
	mSockets          = gauge("container_sockets", "Number of open sockets for the container.", baseMetricLabels)
	mLastSeen         = gauge("container_last_seen", "Last time a container was seen by the exporter", baseMetricLabels)
	mStartTime        = gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", baseMetricLabels)
	mSpecCPUPeriod    = gauge("container_spec_cpu_period", "CPU period of the container.", baseMetricLabels)
	mSpecCPUQuota     = gauge("container_spec_cpu_quota", "CPU quota of the container.", baseMetricLabels)
	mSpecCPUShares    = gauge("container_spec_cpu_shares", "CPU share of the container.", baseMetricLabels)
	mSpecMemLimit     = gauge("container_spec_memory_limit_bytes", "Memory limit for the container.", baseMetricLabels)
	mSpecMemSwapLimit = gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", baseMetricLabels)
	mNetRxBytes       = counter("container_network_receive_bytes_total", "Cumulative count of bytes received", networkMetricLabels)
	mNetRxPackets     = counter("container_network_receive_packets_total", "Cumulative count of packets received", networkMetricLabels)
	mNetRxDropped     = counter("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", networkMetricLabels)
	mNetRxErrors      = counter("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", networkMetricLabels)
	mNetTxBytes       = counter("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", networkMetricLabels)
	mNetTxPackets     = counter("container_network_transmit_packets_total", "Cumulative count of packets transmitted", networkMetricLabels)
	mNetTxDropped     = counter("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", networkMetricLabels)
	mNetTxErrors      = counter("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", networkMetricLabels)
	metricDescs       = []metricDesc{
		mCPUUsage, mCPUUser, mCPUSystem, mCPUPeriods, mCPUThrottled, mCPUThrottledSecs,
		mMemCache, mMemRSS, mMemMapped, mMemSwap, mMemFailcnt, mMemUsage, mMemMaxUsage, mMemWorkingSet,
		mMemActiveFile, mMemInactiveFile, mMemKernel, mMemFailures, mOOMEvents,
		mProcesses, mThreads, mThreadsMax, mFileDescriptors, mSockets,
		mFsUsage, mFsLimit, mFsInodesTotal, mFsInodesFree, mFsReadBytes, mFsReads, mFsWriteBytes, mFsWrites, mBlkioDevice,
		mLastSeen, mStartTime,
		mSpecCPUPeriod, mSpecCPUQuota, mSpecCPUShares, mSpecMemLimit, mSpecMemSwapLimit,
		mNetRxBytes, mNetRxPackets, mNetRxDropped, mNetRxErrors, mNetTxBytes, mNetTxPackets, mNetTxDropped, mNetTxErrors,
		mPressureCPUStalled, mPressureCPUWaiting, mPressureMemStalled, mPressureMemWaiting, mPressureIOStalled, mPressureIOWaiting,
	}
)

// The kubelet's pressure (PSI) counters, as cAdvisor names them: "stalled" is full,
// "waiting" some.
var (
	mPressureCPUStalled = counter("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", baseMetricLabels)
	mPressureCPUWaiting = counter("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", baseMetricLabels)
	mPressureMemStalled = counter("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", baseMetricLabels)
	mPressureMemWaiting = counter("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", baseMetricLabels)
	mPressureIOStalled  = counter("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", baseMetricLabels)
	mPressureIOWaiting  = counter("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", baseMetricLabels)
)

// metricSet collects the metrics of one pod or container, all with the same base
// labels.
type metricSet struct {
	labels []string
	out    []*runtimeapi.Metric
}

// add appends a value of d; extra are the label values after the base ones.
func (m *metricSet) add(d metricDesc, v uint64, extra ...string) {
	m.out = append(m.out, &runtimeapi.Metric{
		Name:        d.name,
		MetricType:  d.typ,
		LabelValues: append(append(make([]string, 0, len(m.labels)+len(extra)), m.labels...), extra...),
		Value:       &runtimeapi.UInt64Value{Value: v},
	})
}
