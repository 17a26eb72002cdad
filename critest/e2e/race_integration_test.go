//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// A slow CNI DEL in one pod's StopPodSandbox holds up nothing else: status reads of
// that pod, and a StopContainer in another pod (whose exit the shared event loop must
// handle meanwhile) finish while the DEL is still blocked.
func TestSlowCNIDelBlocksNothingElse(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	plugin := fmt.Sprintf(`#!/bin/sh
# A CNI plugin that adds nothing and, once armed, blocks a DEL until released.
cat >/dev/null
case "$CNI_COMMAND" in
ADD) echo '{"cniVersion":"1.0.0"}' ;;
DEL)
	if rm %[1]s/arm-del 2>/dev/null; then
		touch %[1]s/reached-del
		i=0
		while [ ! -e %[1]s/release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
	fi ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
esac
`, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slowdel"), []byte(plugin), 0o755))
	env, _ := imageEnv(t, harness.Options{
		CNI:   harness.CNIOptions{FirstPlugins: []map[string]any{{"type": "slowdel"}}},
		Shimd: harness.ShimdOptions{CNIBinDirs: []string{dir}},
	})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	slow := runPod(t, rs, podConfig("slowdel"))
	other := newPod(t, rs, "other")
	id := other.run(other.container("main", "sleep", "1000"))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "arm-del"), nil, 0o644))
	stopped := make(chan error, 1)
	go func() {
		_, err := rs.StopPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: slow})
		stopped <- err
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "reached-del"))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the DEL was not reached")

	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, slow).State)
	listPods(t, rs, nil)
	_, err := rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
	require.NoError(t, err)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, containerStatus(t, rs, id).State)
	select {
	case err := <-stopped:
		t.Fatalf("the slow pod's stop returned (%v) before its DEL was released", err)
	default:
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "release"), nil, 0o644))
	require.NoError(t, <-stopped)
	stopRemove(t, rs, slow)
	stopRemove(t, rs, other.id)
}

// A container whose command the image does not have fails to start with
// FailedPrecondition naming the command, and is EXITED with reason StartError.
func TestStartContainerMissingCommand(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "nocmd")
	for _, cmd := range []string{"/does-not-exist", "/etc/passwd"} {
		id := pod.create(pod.container("c"+strings.Trim(strings.ReplaceAll(cmd, "/", "-"), "-"), cmd))
		_, err := rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", cmd, err)
		require.Contains(t, err.Error(), cmd)
		st := containerStatus(t, rs, id)
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_EXITED, st.State)
		require.Equal(t, "StartError", st.Reason)
	}
	stopRemove(t, rs, pod.id)
}

// A container whose command ends at once starts without error, however its exit
// and the start race: containerd's task Start asks the shim for the task's state
// after starting it, so shimd must not delete the exited task before that answer
// (CI once saw critest's "starting container with log" fail on that).
func TestStartContainerThatExitsAtOnce(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "quickexit")
	startQuickExits(t, rs, pod, pod.container)
	stopRemove(t, rs, pod.id)
}

// startQuickExits creates 24 containers in pod that print a line and exit, starts
// them 6 at a time, and checks that every start succeeded and every container
// exited 0 with its line logged. container makes a container's config.
func startQuickExits(t *testing.T, rs runtimeapi.RuntimeServiceClient, pod *podFixture, container func(name string, cmd ...string) *runtimeapi.ContainerConfig) {
	const n, parallel = 24, 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = pod.create(container(fmt.Sprintf("q%d", i), "echo", "hello"))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	for i, id := range ids {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, errs[i] = rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: id})
		}(i, id)
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			t.Errorf("start q%d: %v", i, err)
		}
	}
	for i, id := range ids {
		st := waitExited(t, rs, id)
		if errs[i] != nil {
			continue
		}
		require.Equal(t, int32(0), st.ExitCode, "q%d: %s %s", i, st.Reason, st.Message)
		require.Equal(t, "Completed", st.Reason, "q%d", i)
		waitLog(t, st.LogPath, " stdout F hello\n")
	}
	require.Zero(t, failed, "of %d starts", n)
}
