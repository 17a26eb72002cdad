package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func resources(r *runtimeapi.LinuxContainerResources) func(*Input) {
	return func(in *Input) { in.Config.Linux.Resources = r }
}

func TestContainerResources(t *testing.T) {
	huge := []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}
	runCases(t, []testCase{
		{name: "no resources: nothing set, oom inherited", check: func(t *testing.T, s *specs.Spec) {
			require.Nil(t, s.Linux.Resources.CPU)
			require.Nil(t, s.Linux.Resources.Memory)
			require.Nil(t, s.Process.OOMScoreAdj)
		}},
		{name: "cpu and memory", mutate: resources(&runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, CpusetCpus: "0-1", CpusetMems: "0",
			MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 128 << 20,
		}), check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, &specs.LinuxCPU{Period: ptr(uint64(100000)), Quota: ptr(int64(50000)),
				Shares: ptr(uint64(512)), Cpus: "0-1", Mems: "0"}, s.Linux.Resources.CPU)
			require.Equal(t, &specs.LinuxMemory{Limit: ptr(int64(64 << 20)), Swap: ptr(int64(128 << 20))}, s.Linux.Resources.Memory)
		}},
		{name: "zero fields are not set", mutate: resources(&runtimeapi.LinuxContainerResources{CpuShares: 2}),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, &specs.LinuxCPU{Shares: ptr(uint64(2))}, s.Linux.Resources.CPU)
				require.Equal(t, &specs.LinuxMemory{}, s.Linux.Resources.Memory)
			}},
		{name: "memory limit alone: swap left to the kubelet", mutate: resources(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}),
			check: func(t *testing.T, s *specs.Spec) { require.Nil(t, s.Linux.Resources.Memory.Swap) }},
		{name: "unlimited quota -1 kept", mutate: resources(&runtimeapi.LinuxContainerResources{CpuQuota: -1}),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, int64(-1), *s.Linux.Resources.CPU.Quota) }},
		{name: "negative period", mutate: resources(&runtimeapi.LinuxContainerResources{CpuPeriod: -1}), wantErr: errdefs.ErrInvalidArgument},
		{name: "negative shares", mutate: resources(&runtimeapi.LinuxContainerResources{CpuShares: -2}), wantErr: errdefs.ErrInvalidArgument},
		{name: "hugepages with the controller", mutate: func(in *Input) {
			resources(&runtimeapi.LinuxContainerResources{HugepageLimits: huge})(in)
			in.HugetlbController = true
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 4 << 20}}, s.Linux.Resources.HugepageLimits)
		}},
		{name: "hugepages without the controller are dropped", mutate: resources(&runtimeapi.LinuxContainerResources{HugepageLimits: huge}),
			check: func(t *testing.T, s *specs.Spec) { require.Nil(t, s.Linux.Resources.HugepageLimits) }},
		{name: "unified", mutate: resources(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1000000"}}),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, map[string]string{"memory.high": "1000000"}, s.Linux.Resources.Unified)
			}},
		{name: "unified empty key", mutate: resources(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"": "1"}}),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "unified cgroup core file", mutate: resources(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.procs": "1"}}),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "oom_score_adj as asked", mutate: resources(&runtimeapi.LinuxContainerResources{OomScoreAdj: 1000}),
			check: oom(1000)},
		{name: "oom_score_adj 0 is set", mutate: resources(&runtimeapi.LinuxContainerResources{}), check: oom(0)},
		{name: "oom_score_adj clamped to shimd's own", mutate: func(in *Input) {
			resources(&runtimeapi.LinuxContainerResources{OomScoreAdj: -997})(in)
			in.MinOOMScoreAdj = -500
		}, check: oom(-500)},
		{name: "oom_score_adj above the minimum kept", mutate: func(in *Input) {
			resources(&runtimeapi.LinuxContainerResources{OomScoreAdj: 999})(in)
			in.MinOOMScoreAdj = -500
		}, check: oom(999)},
		{name: "oom_score_adj out of range", mutate: resources(&runtimeapi.LinuxContainerResources{OomScoreAdj: -1001}),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "default cgroup path", check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/shimd/c1", s.Linux.CgroupsPath) }},
		{name: "cgroup path from the caller", mutate: func(in *Input) { in.CgroupsPath = "/kubepods/podu/c1" },
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/kubepods/podu/c1", s.Linux.CgroupsPath) }},
		{name: "systemd cgroup path from the caller", mutate: func(in *Input) {
			in.CgroupDriver, in.CgroupsPath = "systemd", "kubepods-podu.slice:shimd:c1"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "kubepods-podu.slice:shimd:c1", s.Linux.CgroupsPath)
		}},
	})
}

func oom(want int) func(*testing.T, *specs.Spec) {
	return func(t *testing.T, s *specs.Spec) {
		require.NotNil(t, s.Process.OOMScoreAdj)
		require.Equal(t, want, *s.Process.OOMScoreAdj)
	}
}

// CheckUnified: the keys the kubelet and people send pass; a key that is not a cgroup
// v2 file name, a cgroup core file, a file that only reports, and a value with NUL, a
// carriage return, a newline outside a keyed file or over a page are InvalidArgument
// naming the field and the key.
func TestCheckUnified(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		ok         bool
	}{
		{"memory.high", "1073741824", true},
		{"memory.high", "max", true},
		{"memory.low", "0", true},
		{"memory.min", "1048576", true},
		{"memory.max", "1073741824", true}, // also a typed field: passed as is
		{"memory.oom.group", "1", true},
		{"memory.swap.max", "0", true},
		{"memory.zswap.max", "0", true},
		{"cpu.max", "max 100000", true},
		{"cpu.weight", "100", true},
		{"cpu.idle", "1", true},
		{"cpu.uclamp.min", "10.50", true},
		{"cpuset.cpus", "0-3,8", true},
		{"cpuset.cpus.partition", "member", true},
		{"pids.max", "max", true},
		{"hugetlb.2MB.max", "4194304", true},
		{"hugetlb.1GB.rsvd.max", "1073741824", true},
		{"hugetlb.64KB.max", "65536", true},
		{"io.max", "8:0 rbps=2097152 wiops=120", true},
		{"io.max", "259:0 rbps=2097152 wiops=120\n253:0 rbps=2097152 wiops=120", true}, // the runtime spec's example
		{"io.weight", "default 100\n8:16 200\n", true},
		{"memory.high", strings.Repeat("1", 4096), true},

		{"", "1", false},
		{"memory", "1", false},
		{".hidden", "1", false},
		{"memory.", "1", false},
		{"memory..high", "1", false},
		{"memory/../x", "1", false},
		{"../memory.max", "1", false},
		{"Memory.High", "1", false},
		{"memory.High", "1", false},
		{"1memory.high", "1", false},
		{"a b", "1", false},
		{"memory.high ", "1", false},
		{"memory.high\x00", "1", false},
		{"hugetlb.2XB.max", "1", false},
		{"hugetlb.MB.max", "1", false},
		{"memory.2MB.max", "1", false},
		{strings.Repeat("m", 200) + "." + strings.Repeat("x", 60), "1", false},
		{"cgroup.procs", "1", false},
		{"cgroup.threads", "1", false},
		{"cgroup.subtree_control", "+memory", false},
		{"cgroup.type", "threaded", false},
		{"cgroup.max.depth", "1", false},
		{"cgroup.max.descendants", "1", false},
		{"cgroup.freeze", "1", false},
		{"cgroup.kill", "1", false},
		{"cgroup.pressure", "0", false},
		{"cgroup.controllers", "", false},
		{"memory.current", "1", false},
		{"memory.peak", "1", false},
		{"memory.stat", "1", false},
		{"memory.events", "1", false},
		{"memory.events.local", "1", false},
		{"memory.pressure", "some 150000 1000000", false},
		{"cpu.stat", "1", false},
		{"cpu.stat.local", "1", false},
		{"io.pressure", "1", false},
		{"pids.current", "1", false},
		{"cpuset.cpus.effective", "0", false},
		{"hugetlb.2MB.rsvd.current", "1", false},
		{"hugetlb.2MB.numa_stat", "1", false},

		{"memory.high", "1\n2", false},
		{"memory.max", "max\n", false},
		{"memory.high", "1\x00", false},
		{"memory.high", "1\r", false},
		{"io.max", "8:0 rbps=1\r\n", false},
		{"memory.high", strings.Repeat("1", 4097), false},
	} {
		err := CheckUnified("linux.unified", map[string]string{"cpu.weight": "100", tc.key: tc.value})
		if tc.ok {
			require.NoError(t, err, "%q: %q", tc.key, tc.value)
			continue
		}
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%q: %q", tc.key, tc.value)
		require.ErrorContains(t, err, "linux.unified: ")
		require.ErrorContains(t, err, fmt.Sprintf("%.64q", tc.key))
	}
}
