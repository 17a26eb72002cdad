//go:build integration

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// raceCodes runs call in a loop on 4 goroutines until stop returns, and counts the
// codes it got, with one message of each.
func raceCodes(call func(ctx context.Context) error, stop func()) (map[codes.Code]int, map[codes.Code]string) {
	got, msgs := map[codes.Code]int{}, map[codes.Code]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := call(ctx)
				cancel()
				mu.Lock()
				got[status.Code(err)]++
				if err != nil {
					msgs[status.Code(err)] = err.Error()
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	stop()
	time.Sleep(100 * time.Millisecond)
	close(done)
	wg.Wait()
	return got, msgs
}

func requireCodes(t *testing.T, what string, got map[codes.Code]int, msgs map[codes.Code]string, allowed ...codes.Code) {
	t.Helper()
	t.Logf("%s: %v", what, got)
	for code, n := range got {
		require.Contains(t, allowed, code, "%s answered %s %d times, e.g. %s", what, code, n, msgs[code])
	}
}

// ExecSync and UpdateContainerResources racing StopContainer, and
// UpdatePodSandboxResources racing RemovePodSandbox, answer deliberate codes; a
// command that does not exist exits 127 with the reason on stderr.
func TestRacesWithStopAnswerDeliberateCodes(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "races")

	id := pod.run(pod.container("c0", "sleep", "1000"))
	resp, err := execSync(t, rs, id, 10, "/does-not-exist")
	require.NoError(t, err)
	require.EqualValues(t, 127, resp.ExitCode)
	require.Contains(t, string(resp.Stderr), "/does-not-exist")
	resp, err = execSync(t, rs, id, 10, "/etc/passwd")
	require.NoError(t, err)
	require.EqualValues(t, 126, resp.ExitCode, "%s", resp.Stderr)

	for i := 0; i < 3; i++ {
		if i > 0 {
			id = pod.run(pod.container("c"+string(rune('0'+i)), "sleep", "1000"))
		}
		stop := func() {
			_, err := rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0})
			require.NoError(t, err)
		}
		got, msgs := raceCodes(func(ctx context.Context) error {
			_, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 10})
			return err
		}, stop)
		requireCodes(t, "ExecSync racing StopContainer", got, msgs, codes.OK, codes.FailedPrecondition)
	}
	for i := 0; i < 3; i++ {
		id := pod.run(pod.container("u"+string(rune('0'+i)), "sleep", "1000"))
		stop := func() {
			_, err := rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0})
			require.NoError(t, err)
		}
		got, msgs := raceCodes(func(ctx context.Context) error {
			_, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
				Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256}})
			return err
		}, stop)
		requireCodes(t, "UpdateContainerResources racing StopContainer", got, msgs, codes.OK, codes.FailedPrecondition)
	}
	stopRemove(t, rs, pod.id)

	for i := 0; i < 3; i++ {
		podID := runPod(t, rs, podConfig("resize"))
		remove := func() { stopRemove(t, rs, podID) }
		got, msgs := raceCodes(func(ctx context.Context) error {
			_, err := rs.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podID,
				Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 256 << 20}})
			return err
		}, remove)
		requireCodes(t, "UpdatePodSandboxResources racing RemovePodSandbox", got, msgs, codes.OK, codes.NotFound)
	}
}
