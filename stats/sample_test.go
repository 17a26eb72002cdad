package stats

import (
	"testing"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func u64(v uint64) *uint64 { return &v }

// The CRI stats of one task's cgroup, from containerd's v1 and v2 metrics and what
// shimd reads beside them: pressure in nanoseconds (the kernel counts microseconds),
// swap where the kernel accounts it, the task count where there is a pids controller;
// nil, never zero, where the kernel has nothing.
func TestSampleToCRI(t *testing.T) {
	at := time.Unix(100, 5)
	ts := at.UnixNano()
	kernelPSI := &v2.PSIStats{Some: &v2.PSIData{Avg10: 1.5, Avg60: 0.5, Avg300: 0.25, Total: 1234}, Full: &v2.PSIData{Avg10: 0.5, Total: 99}}
	criPSIWant := &runtimeapi.PsiStats{
		Some: &runtimeapi.PsiData{Avg10: 1.5, Avg60: 0.5, Avg300: 0.25, Total: 1_234_000},
		Full: &runtimeapi.PsiData{Avg10: 0.5, Total: 99_000},
	}
	v1Mem := func(swap *v1.MemoryEntry) *v1.MemoryStat {
		return &v1.MemoryStat{TotalRSS: 300, TotalInactiveFile: 100, TotalPgFault: 7, TotalPgMajFault: 1,
			Usage: &v1.MemoryEntry{Usage: 1000, Limit: 4096}, Swap: swap}
	}
	tests := []struct {
		name     string
		tm       taskMetrics
		wantCPU  *runtimeapi.PsiStats
		wantMem  *runtimeapi.PsiStats
		wantIO   *runtimeapi.IoUsage
		wantSwap *runtimeapi.SwapUsage
		tasks    *uint64
		// wantAvail is the limit less the working set (900), 0 without a limit.
		wantAvail uint64
	}{
		{
			name: "v1 hybrid: PSI from the unified hierarchy, memsw with a limit, pids",
			tm: taskMetrics{at: at, data: &v1.Metrics{CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 5000}},
				Memory: v1Mem(&v1.MemoryEntry{Usage: 1500, Limit: 6144}), Pids: &v1.PidsStat{Current: 4}},
				psi: psiSet{cpu: kernelPSI, memory: kernelPSI, io: kernelPSI}},
			wantCPU: criPSIWant, wantMem: criPSIWant,
			wantIO: &runtimeapi.IoUsage{Timestamp: ts, Psi: criPSIWant},
			wantSwap: &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: 500},
				SwapAvailableBytes: &runtimeapi.UInt64Value{Value: 1548}},
			tasks: u64(4), wantAvail: 4096 - 900,
		},
		{
			name: "v1 without the unified hierarchy: no PSI; memsw without a limit",
			tm: taskMetrics{at: at, data: &v1.Metrics{CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 5000}},
				Memory: v1Mem(&v1.MemoryEntry{Usage: 1000, Limit: 9223372036854771712}), Pids: &v1.PidsStat{Current: 1}}},
			wantSwap: &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: 0}},
			tasks:    u64(1), wantAvail: 4096 - 900,
		},
		{
			name: "v1 without swap accounting or pids controller",
			tm: taskMetrics{at: at, data: &v1.Metrics{CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 5000}},
				Memory: v1Mem(&v1.MemoryEntry{})}},
			wantAvail: 4096 - 900,
		},
		{
			name: "v2: PSI, swap and pids from the shim",
			tm: taskMetrics{at: at, swapFile: true, data: &v2.Metrics{CPU: &v2.CPUStat{UsageUsec: 5, PSI: kernelPSI},
				Memory: &v2.MemoryStat{Usage: 1000, InactiveFile: 100, Anon: 300, Pgfault: 7, Pgmajfault: 1, UsageLimit: 2000,
					SwapUsage: 64, SwapLimit: 1 << 20, PSI: kernelPSI},
				Io: &v2.IOStat{PSI: kernelPSI}, Pids: &v2.PidsStat{Current: 4, Limit: 1<<64 - 1}}},
			wantCPU: criPSIWant, wantMem: criPSIWant,
			wantIO: &runtimeapi.IoUsage{Timestamp: ts, Psi: criPSIWant},
			wantSwap: &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: 64},
				SwapAvailableBytes: &runtimeapi.UInt64Value{Value: 1<<20 - 64}},
			tasks: u64(4), wantAvail: 2000 - 900,
		},
		{
			name: "v2 with swap.max 0 (the kubelet's NoSwap) and no limit on pids",
			tm: taskMetrics{at: at, swapFile: true, data: &v2.Metrics{CPU: &v2.CPUStat{UsageUsec: 5},
				Memory: &v2.MemoryStat{Usage: 1000, InactiveFile: 100, Anon: 300, Pgfault: 7, Pgmajfault: 1, UsageLimit: 1<<64 - 1},
				Pids:   &v2.PidsStat{Current: 2}}},
			wantSwap: &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: 0},
				SwapAvailableBytes: &runtimeapi.UInt64Value{Value: 0}},
			tasks: u64(2),
		},
		{
			name: "v2 with psi=0, no swap accounting, no pids controller",
			tm: taskMetrics{at: at, data: &v2.Metrics{CPU: &v2.CPUStat{UsageUsec: 5},
				Memory: &v2.MemoryStat{Usage: 1000, InactiveFile: 100, Anon: 300, Pgfault: 7, Pgmajfault: 1},
				Io:     &v2.IOStat{}, Pids: &v2.PidsStat{}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			smp, err := sampleOf(tt.tm)
			require.NoError(t, err)
			cpu, mem := cpuMem(smp, 0)
			require.Equal(t, ts, cpu.Timestamp)
			require.Equal(t, uint64(5000), cpu.UsageCoreNanoSeconds.GetValue())
			require.Equal(t, tt.wantCPU, cpu.Psi)
			require.Equal(t, &runtimeapi.MemoryUsage{Timestamp: ts,
				WorkingSetBytes: &runtimeapi.UInt64Value{Value: 900}, AvailableBytes: &runtimeapi.UInt64Value{Value: tt.wantAvail}, UsageBytes: &runtimeapi.UInt64Value{Value: 1000},
				RssBytes: &runtimeapi.UInt64Value{Value: 300}, PageFaults: &runtimeapi.UInt64Value{Value: 7},
				MajorPageFaults: &runtimeapi.UInt64Value{Value: 1}, Psi: tt.wantMem}, mem)
			require.Equal(t, tt.wantIO, ioUsage(smp))
			require.Equal(t, tt.wantSwap, swapUsage(smp))
			require.Equal(t, tt.tasks, smp.tasks)
		})
	}
	_, err := sampleOf(taskMetrics{data: "neither"})
	require.Error(t, err)
}

// A pod's task count adds up its tasks' where they have one, and stays unknown when
// none has.
func TestAddSampleTasks(t *testing.T) {
	var total cgroupSample
	addSample(&total, cgroupSample{cpuNanos: 1})
	require.Nil(t, total.tasks)
	addSample(&total, cgroupSample{cpuNanos: 2, tasks: u64(1)})
	addSample(&total, cgroupSample{cpuNanos: 3, tasks: u64(3)})
	require.Equal(t, u64(4), total.tasks)
	require.Equal(t, uint64(6), total.cpuNanos)
}
