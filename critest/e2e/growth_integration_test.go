//go:build integration

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestNoGrowthAfterPodLifecycles runs GROWTH_LIFECYCLES pod lifecycles (default 40;
// `make e2e-growth` runs 1000): pod, container, exec, stop, remove. Afterwards
// shimd's goroutines and open descriptors are back at their baseline, and its live
// heap after a GC has not grown by more than 2 MiB: nothing is kept per pod once it
// is gone. The numbers (heap, goroutines, fds, RSS) are logged before and after;
// GROWTH_HEAP_PROFILE=<file> saves shimd's heap profile at the end.
func TestNoGrowthAfterPodLifecycles(t *testing.T) {
	requireRoot(t)
	n := envInt("GROWTH_LIFECYCLES", 40)
	sock := filepath.Join(t.TempDir(), "debug.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[debug]\naddress = %q\n", sock)}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	debug := debugClient(sock)

	for i := 0; i < 10; i++ { // warm up: pools, caches and connections that stay
		shortLifecycle(t, rs, i)
	}
	base, baseHeap := stableStats(t, debug), liveHeap(t, debug)
	t.Logf("baseline after 10: %d goroutines, %d open fds, live heap %.2f MiB, %s",
		base.Goroutines, base.OpenFDs, mib(baseHeap), rssOf(t, env.Shimd.PID()))
	start := time.Now()
	for i := 0; i < n; i++ {
		shortLifecycle(t, rs, 10+i)
		if (i+1)%250 == 0 {
			t.Logf("after %d: live heap %.2f MiB, %s", i+1, mib(liveHeap(t, debug)), rssOf(t, env.Shimd.PID()))
		}
	}
	t.Logf("%d lifecycles in %s", n, time.Since(start).Round(time.Second))
	waitSettled(t, debug, base, debugStats{Goroutines: 2, OpenFDs: 2}, time.Minute)
	heap := liveHeap(t, debug)
	t.Logf("after %d: live heap %.2f MiB (baseline %.2f), %s", n, mib(heap), mib(baseHeap), rssOf(t, env.Shimd.PID()))
	if path := os.Getenv("GROWTH_HEAP_PROFILE"); path != "" { // for go tool pprof
		prof, err := debugGet(debug, "/debug/pprof/heap?gc=1")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, prof, 0o644))
	}
	require.Less(t, heap, baseHeap+2<<20, "shimd's live heap grew over %d pod lifecycles", n)
	require.Empty(t, listPods(t, rs, nil))
	env.AssertNoLeaks(t, time.Minute)
}

// shortLifecycle: a pod with one container that is started, exec'd into, killed
// (timeout 0) and removed, then the pod is stopped and removed.
func shortLifecycle(t *testing.T, rs runtimeapi.RuntimeServiceClient, i int) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	cfg := podConfig(fmt.Sprintf("grow%d", i))
	logPath := fmt.Sprintf("grow-%d-%d.log", i, time.Now().UnixNano())
	t.Cleanup(func() { os.Remove(filepath.Join(cfg.LogDirectory, logPath)) })
	pod := runPod(t, rs, cfg)
	c, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, SandboxConfig: cfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
			Command:  []string{"sleep", "1000"},
			LogPath:  logPath,
		}})
	require.NoError(t, err)
	_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
	require.NoError(t, err)
	out, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"echo", "hi"}, Timeout: 10})
	require.NoError(t, err)
	require.Equal(t, "hi\n", string(out.Stdout))
	_, err = rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ContainerId, Timeout: 0})
	require.NoError(t, err)
	_, err = rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ContainerId})
	require.NoError(t, err)
	stopRemove(t, rs, pod)
}

// liveHeap is shimd's HeapInuse right after a GC, from its pprof heap profile.
func liveHeap(t *testing.T, c *http.Client) int64 {
	t.Helper()
	body, err := debugGet(c, "/debug/pprof/heap?gc=1&debug=1")
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no HeapInuse in shimd's heap profile:\n%.2000s", body)
	return 0
}

// rssOf is "RSS N MiB (anon N, file N)" of a process, from /proc.
func rssOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	kb := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.HasPrefix(k, "Rss") || k == "VmRSS" {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb[k], _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return fmt.Sprintf("RSS %.1f MiB (anon %.1f, file %.1f)", float64(kb["VmRSS"])/1024, float64(kb["RssAnon"])/1024, float64(kb["RssFile"])/1024)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
