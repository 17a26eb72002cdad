//go:build integration

package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// scrape reads shimd's /metrics over its unix socket: "name{labels}" -> value.
func scrape(t *testing.T, sock string) map[string]float64 {
	t.Helper()
	c := harness.UnixHTTPClient(sock, 10*time.Second)
	resp, err := c.Get("http://shimd/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

func TestMetricsDuringPodLifecycle(t *testing.T) {
	requireRoot(t)
	dir, err := os.MkdirTemp("/tmp", "shimd-metrics-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "metrics.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[metrics]\naddress = %q\n", sock)}})
	rs := env.Shimd.Runtime(t)
	// Recovery is done once Status answers.
	require.Eventually(t, func() bool {
		_, err := rs.Status(ctxT(t, 5*time.Second), &runtimeapi.StatusRequest{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)

	before := scrape(t, sock)
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, 1.0, before["shimd_containerd_up"])
	require.Greater(t, before["shimd_recovery_duration_seconds"], 0.0)
	require.Equal(t, 0.0, before[`shimd_pods{state="SANDBOX_READY"}`])
	require.Contains(t, before, "go_goroutines")
	require.Greater(t, before["shimd_process_open_fds"], 0.0)
	require.Equal(t, 0.0, before["shimd_rpc_in_flight"], "no RPC is in flight between calls")
	require.Contains(t, before, "shimd_cleanups_pending")
	require.Equal(t, 0.0, before["shimd_cleanups_pending"], "no cleanup failed")
	require.Equal(t, 0.0, before["shimd_cleanups_retried_total"])

	pod := newPod(t, rs, "metrics")
	pull(t, env, busyboxImage)
	ctr := pod.run(pod.container("sleeper", "sleep", "300"))
	_, err = rs.PodSandboxStatus(ctxT(t, 10*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: strings.Repeat("0f", 32)})
	require.Equal(t, codes.NotFound, status.Code(err))

	mid := scrape(t, sock)
	key := func(rpc, code string) string {
		return fmt.Sprintf(`shimd_rpc_requests_total{code=%q,rpc=%q}`, code, rpc)
	}
	require.Equal(t, before[key("RunPodSandbox", "OK")]+1, mid[key("RunPodSandbox", "OK")])
	require.Equal(t, before[key("PodSandboxStatus", "NotFound")]+1, mid[key("PodSandboxStatus", "NotFound")])
	require.Equal(t, 1.0, mid[`shimd_rpc_duration_seconds_count{rpc="RunPodSandbox"}`])
	require.Equal(t, 1.0, mid[`shimd_pods{state="SANDBOX_READY"}`])
	require.Equal(t, 1.0, mid[`shimd_containers{state="CONTAINER_RUNNING"}`])
	require.Equal(t, 1.0, mid[`shimd_cni_duration_seconds_count{op="add"}`])
	require.Equal(t, 0.0, mid[`shimd_cni_failures_total{op="add"}`])
	require.Equal(t, before[`shimd_image_pulls_total{result="success"}`]+1, mid[`shimd_image_pulls_total{result="success"}`])
	require.Greater(t, mid["shimd_image_pull_bytes_total"], before["shimd_image_pull_bytes_total"])
	require.Equal(t, before["shimd_image_pull_duration_seconds_count"]+1, mid["shimd_image_pull_duration_seconds_count"])

	_, err = rs.StopContainer(ctxT(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 1})
	require.NoError(t, err)
	stopRemove(t, rs, pod.id)
	after := scrape(t, sock)
	require.Equal(t, 0.0, after[`shimd_pods{state="SANDBOX_READY"}`])
	require.Equal(t, 0.0, after[`shimd_containers{state="CONTAINER_RUNNING"}`])
	require.GreaterOrEqual(t, after[`shimd_cni_duration_seconds_count{op="del"}`], 1.0)
	require.Equal(t, 0.0, after[`shimd_cni_failures_total{op="del"}`])
	require.Equal(t, mid[key("RunPodSandbox", "OK")], after[key("RunPodSandbox", "OK")])
}
