//go:build integration

package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// UpdatePodSandboxResources is recorded: PodSandboxStatus's verbose info reports the
// pod-level resources, also after kill -9 and restart; an unknown pod is NotFound.
func TestUpdatePodSandboxResources(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	id := runPod(t, rs, podConfig("resize"))
	want := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 150000, MemoryLimitInBytes: 256 << 20}
	_, err := rs.UpdatePodSandboxResources(ctxT(t, time.Minute), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: id, Resources: want, Overhead: &runtimeapi.LinuxContainerResources{CpuShares: 8},
	})
	require.NoError(t, err)
	check := func(when string) {
		resp, err := rs.PodSandboxStatus(ctxT(t, time.Minute), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		require.NoError(t, err)
		var info struct {
			Resources struct {
				CpuQuota           int64 `json:"cpu_quota"`
				MemoryLimitInBytes int64 `json:"memory_limit_in_bytes"`
			} `json:"resources"`
			Overhead struct {
				CpuShares int64 `json:"cpu_shares"`
			} `json:"overhead"`
		}
		require.NoError(t, json.Unmarshal([]byte(resp.Info["info"]), &info), when)
		require.Equal(t, want.CpuQuota, info.Resources.CpuQuota, when)
		require.Equal(t, want.MemoryLimitInBytes, info.Resources.MemoryLimitInBytes, when)
		require.Equal(t, int64(8), info.Overhead.CpuShares, when)
	}
	check("after the update")
	rs = restartShimd(t, env)
	check("after kill -9 and restart")

	_, err = rs.UpdatePodSandboxResources(ctxT(t, time.Minute), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Resources: want})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	stopRemove(t, rs, id)
}
