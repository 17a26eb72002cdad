package spec

import (
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
