package spec

import (
	"encoding/json"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const specTypeURL = "types.containerd.io/opencontainers/runtime-spec/1/Spec"

func TestResources(t *testing.T) {
	tests := []struct {
		name string
		in   *runtimeapi.LinuxContainerResources
		want *specs.LinuxResources
	}{
		{name: "nil", want: &specs.LinuxResources{}},
		{name: "all fields", in: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 256, CpusetCpus: "1", CpusetMems: "0",
			MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 2 << 30, OomScoreAdj: 5,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1}},
			Unified:        map[string]string{"cpu.weight": "10"},
		}, want: &specs.LinuxResources{
			CPU:     &specs.LinuxCPU{Period: ptr(uint64(100000)), Quota: ptr(int64(20000)), Shares: ptr(uint64(256)), Cpus: "1", Mems: "0"},
			Memory:  &specs.LinuxMemory{Limit: ptr(int64(1 << 30)), Swap: ptr(int64(2 << 30))},
			Unified: map[string]string{"cpu.weight": "10"},
		}},
		{name: "zero and negative fields unset", in: &runtimeapi.LinuxContainerResources{CpuPeriod: -1, CpuShares: -5, MemoryLimitInBytes: 10},
			want: &specs.LinuxResources{CPU: &specs.LinuxCPU{}, Memory: &specs.LinuxMemory{Limit: ptr(int64(10))}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, Resources(tc.in, -999)) })
	}
}

func TestUpdateResources(t *testing.T) {
	in := baseInput()
	in.Config.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, MemoryLimitInBytes: 64 << 20}
	base, err := Container(in)
	require.NoError(t, err)
	stored := func(t *testing.T) *containers.Container {
		data, err := json.Marshal(base)
		require.NoError(t, err)
		return &containers.Container{ID: "c1", Spec: &anypb.Any{TypeUrl: specTypeURL, Value: data}}
	}
	decode := func(t *testing.T, rec *containers.Container) *specs.Spec {
		require.Equal(t, specTypeURL, rec.Spec.GetTypeUrl())
		var s specs.Spec
		require.NoError(t, json.Unmarshal(rec.Spec.GetValue(), &s))
		return &s
	}
	tests := []struct {
		name    string
		rec     func(t *testing.T) *containers.Container
		update  *runtimeapi.LinuxContainerResources
		check   func(t *testing.T, s *specs.Spec)
		wantErr error
	}{
		{name: "set fields replace, others kept", rec: stored,
			update: &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 128 << 20, Unified: map[string]string{"a": "b"}},
			check: func(t *testing.T, s *specs.Spec) {
				r := s.Linux.Resources
				require.Equal(t, uint64(1024), *r.CPU.Shares)
				require.Equal(t, int64(50000), *r.CPU.Quota, "kept")
				require.Equal(t, int64(128<<20), *r.Memory.Limit)
				require.Equal(t, map[string]string{"a": "b"}, r.Unified)
				require.Equal(t, base.Linux.Resources.Devices, r.Devices, "device rules untouched")
				require.Equal(t, base.Process.Args, s.Process.Args, "rest of the spec untouched")
			}},
		{name: "spec without resources", rec: func(t *testing.T) *containers.Container {
			return &containers.Container{ID: "c1", Spec: &anypb.Any{TypeUrl: specTypeURL, Value: []byte(`{"ociVersion":"1.0.0"}`)}}
		}, update: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-3"}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "0-3", s.Linux.Resources.CPU.Cpus)
		}},
		{name: "swap alone below the stored memory limit", rec: stored,
			update: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 32 << 20}, wantErr: errdefs.ErrInvalidArgument},
		{name: "swap alone at least the stored memory limit", rec: stored,
			update: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}, check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, int64(64<<20), *s.Linux.Resources.Memory.Swap)
			}},
		{name: "memory and swap below it", rec: stored,
			update: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20, MemorySwapLimitInBytes: 128 << 20}, wantErr: errdefs.ErrInvalidArgument},
		{name: "memory raised above a stored swap limit", rec: func(t *testing.T) *containers.Container {
			rec := stored(t)
			require.NoError(t, UpdateResources(rec, Resources(&runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}, 0), false))
			return rec
		}, update: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}, wantErr: errdefs.ErrInvalidArgument},
		{name: "swap without any memory limit", rec: func(t *testing.T) *containers.Container {
			return &containers.Container{ID: "c1", Spec: &anypb.Any{TypeUrl: specTypeURL, Value: []byte(`{"ociVersion":"1.0.0"}`)}}
		}, update: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}, wantErr: errdefs.ErrInvalidArgument},
		{name: "cpu only leaves stored memory unjudged", rec: func(t *testing.T) *containers.Container {
			return &containers.Container{ID: "c1", Spec: &anypb.Any{TypeUrl: specTypeURL,
				Value: []byte(`{"ociVersion":"1.0.0","linux":{"resources":{"memory":{"swap":1}}}}`)}}
		}, update: &runtimeapi.LinuxContainerResources{CpuShares: 2}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, uint64(2), *s.Linux.Resources.CPU.Shares)
		}},
		{name: "no spec", rec: func(t *testing.T) *containers.Container { return &containers.Container{ID: "c1"} },
			update: &runtimeapi.LinuxContainerResources{}, wantErr: errdefs.ErrFailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec(t)
			err := UpdateResources(rec, Resources(tc.update, 0), false)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, decode(t, rec))
		})
	}
	t.Run("bad JSON", func(t *testing.T) {
		rec := &containers.Container{ID: "c1", Spec: &anypb.Any{TypeUrl: specTypeURL, Value: []byte("{")}}
		require.Error(t, UpdateResources(rec, &specs.LinuxResources{}, false))
	})
}

func TestCheckMemorySwap(t *testing.T) {
	for _, tc := range []struct {
		limit, swap int64
		unified, ok bool
	}{
		{0, 0, false, true}, {64 << 20, 0, false, true}, {64 << 20, -1, false, true}, {-1, -1, false, true},
		{64 << 20, 64 << 20, false, true}, {64 << 20, 128 << 20, true, true},
		{64 << 20, 32 << 20, false, false}, {64 << 20, 32 << 20, true, false},
		{0, 64 << 20, false, false}, {0, 64 << 20, true, false},
		{-1, 64 << 20, false, false}, {-1, 64 << 20, true, true},
	} {
		err := CheckMemorySwap("linux", tc.limit, tc.swap, tc.unified)
		if tc.ok {
			require.NoError(t, err, "%+v", tc)
			continue
		}
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%+v", tc)
		require.ErrorContains(t, err, "linux.memory_swap_limit_in_bytes")
	}
}
