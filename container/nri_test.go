package container

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What an NRI plugin sets replaces the container's value; what it leaves unset stays.
func TestFromNRIResources(t *testing.T) {
	base := &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, CpusetCpus: "0-1", OomScoreAdj: 10}
	u := &api.ContainerUpdate{}
	u.SetLinuxMemoryLimit(64 << 20)
	u.SetLinuxCPUSetCPUs("1")
	got := fromNRIResources(u.GetLinux().GetResources(), base)
	want := &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20,
		CpusetCpus: "1", OomScoreAdj: 10}
	require.True(t, proto.Equal(want, got), "got %v", got)
	require.Equal(t, int64(1<<30), base.MemoryLimitInBytes, "the base is not changed")

	// A round trip through NRI's form keeps the values.
	back := fromNRIResources(toNRIResources(base, 0), nil)
	require.Equal(t, base.CpuShares, back.CpuShares)
	require.Equal(t, base.CpuQuota, back.CpuQuota)
	require.Equal(t, base.MemoryLimitInBytes, back.MemoryLimitInBytes)
	require.Equal(t, base.CpusetCpus, back.CpusetCpus)
}
