package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The evented PLEG reads a pod's container statuses and their time from
// PodSandboxStatus: both must be there, the time no older than the statuses.
func TestPodSandboxStatusHasContainerStatusesAndTimestamp(t *testing.T) {
	ctx := context.Background()
	ts := newTestService(t)
	resp, err := ts.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: ts.sb.ID, Config: containerConfig("c"), SandboxConfig: ts.sb.Config})
	require.NoError(t, err)
	_, err = ts.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
	require.NoError(t, err)

	before := time.Now().UnixNano()
	st, err := ts.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: ts.sb.ID})
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Timestamp, before)
	require.LessOrEqual(t, st.Timestamp, time.Now().UnixNano())
	require.Len(t, st.ContainersStatuses, 1)
	require.Equal(t, resp.ContainerId, st.ContainersStatuses[0].Id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.ContainersStatuses[0].State)
}
