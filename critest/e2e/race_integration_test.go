//go:build integration

package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Concurrent StopPodSandbox (and RemovePodSandbox) calls on one pod with running
// containers all succeed.
func TestConcurrentStopPodSandbox(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	for round := 0; round < 3; round++ {
		pod := newPod(t, rs, "stoprace")
		id := pod.id
		for _, name := range []string{"a", "b"} {
			pod.run(pod.container(name, "sleep", "1000"))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				ctx := ctxT(t, time.Minute)
				var err error
				if i%4 == 3 {
					_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
				} else {
					_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
				}
				errs <- err
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		stopRemove(t, rs, id)
	}
}

// StartContainer racing StopPodSandbox: the start either succeeds or fails with
// FailedPrecondition (the pod is not ready), never Unknown.
func TestStartContainerRacingStopPodSandbox(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	codesSeen := map[codes.Code]int{}
	for round := 0; round < 6; round++ {
		pod := newPod(t, rs, "startrace")
		id := pod.create(pod.container("main", "sleep", "1000"))
		startc := make(chan error, 1)
		go func() {
			_, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
			startc <- err
		}()
		// Vary the overlap: the stop lands before, during or after the start.
		time.Sleep(time.Duration(round) * 30 * time.Millisecond)
		_, err := rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
		require.NoError(t, err)
		err = <-startc
		codesSeen[status.Code(err)]++
		if err != nil {
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "start racing a stop: %v", err)
		}
		stopRemove(t, rs, pod.id)
	}
	t.Logf("StartContainer results by code: %v", codesSeen)
}
