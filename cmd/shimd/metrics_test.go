package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/image"
)

func TestInterceptorRecordsRPCMetrics(t *testing.T) {
	m := newMetrics()
	var ready atomic.Bool
	ready.Store(true)
	icpt := unaryInterceptor(&ready, m)
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	missing := func(context.Context, any) (any, error) { return nil, errdefs.ErrNotFound }
	for _, h := range []grpc.UnaryHandler{ok, ok, missing} {
		_, _ = icpt(context.Background(), nil, info, h)
	}
	require.Equal(t, 2.0, testutil.ToFloat64(m.rpcRequests.WithLabelValues("RunPodSandbox", "OK")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.rpcRequests.WithLabelValues("RunPodSandbox", "NotFound")))
	require.Equal(t, 1, testutil.CollectAndCount(m.rpcDuration))
	require.Equal(t, 0.0, testutil.ToFloat64(m.inFlight), "in-flight gauge returns to zero")

	ready.Store(false)
	_, _ = icpt(context.Background(), nil, info, ok)
	require.Equal(t, 1.0, testutil.ToFloat64(m.rpcRequests.WithLabelValues("RunPodSandbox", "Unavailable")))
}

func TestPullAndCNIObservers(t *testing.T) {
	m := newMetrics()
	m.observePull(image.PullStats{Bytes: 1000, Duration: time.Second})
	m.observePull(image.PullStats{Bytes: 10, Duration: time.Second, Err: errors.New("no")})
	require.Equal(t, 1.0, testutil.ToFloat64(m.pulls.WithLabelValues("success")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.pulls.WithLabelValues("failure")))
	require.Equal(t, 1010.0, testutil.ToFloat64(m.pullBytes))
	m.observeCNI("add", time.Millisecond, nil)
	m.observeCNI("del", time.Millisecond, errors.New("plugin failed"))
	require.Equal(t, 0.0, testutil.ToFloat64(m.cniFailures.WithLabelValues("add")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.cniFailures.WithLabelValues("del")))
}

type fakeLister struct{}

func (fakeLister) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		{State: runtimeapi.PodSandboxState_SANDBOX_READY}, {State: runtimeapi.PodSandboxState_SANDBOX_READY},
		{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
	}}, nil
}

func (fakeLister) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}}, nil
}

func TestStateCollectorReadsAtScrape(t *testing.T) {
	c := newStateCollector(fakeLister{}, func(context.Context) (bool, error) { return false, nil })
	want := `
# HELP shimd_containerd_up 1 if containerd answers, 0 if not.
# TYPE shimd_containerd_up gauge
shimd_containerd_up 0
# HELP shimd_pods Pod sandboxes by state (SANDBOX_READY, SANDBOX_NOTREADY).
# TYPE shimd_pods gauge
shimd_pods{state="SANDBOX_NOTREADY"} 1
shimd_pods{state="SANDBOX_READY"} 2
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "shimd_pods", "shimd_containerd_up"))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP shimd_containers Containers by state (CONTAINER_CREATED, _RUNNING, _EXITED, _UNKNOWN).
# TYPE shimd_containers gauge
shimd_containers{state="CONTAINER_CREATED"} 0
shimd_containers{state="CONTAINER_EXITED"} 0
shimd_containers{state="CONTAINER_RUNNING"} 1
shimd_containers{state="CONTAINER_UNKNOWN"} 0
`), "shimd_containers"))
}

// During recovery only Version and ListMetricDescriptors (which the kubelet asks
// once, at its start) are answered.
func TestInterceptorDuringRecovery(t *testing.T) {
	var ready atomic.Bool
	icpt := unaryInterceptor(&ready, newMetrics())
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for rpc, answered := range map[string]bool{"Version": true, "ListMetricDescriptors": true, "ListPodSandboxMetrics": false, "RunPodSandbox": false} {
		resp, err := icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + rpc}, ok)
		if answered {
			require.NoError(t, err, rpc)
			require.Equal(t, "ok", resp, rpc)
		} else {
			require.Error(t, err, rpc)
		}
	}
}
