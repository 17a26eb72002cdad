//go:build integration

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// containerdCalls reads shimd's count of its calls to containerd, by gRPC method.
func containerdCalls(t *testing.T, debug *http.Client) map[string]uint64 {
	t.Helper()
	body, err := debugGet(debug, "/debug/stats")
	require.NoError(t, err)
	var s struct {
		Calls map[string]uint64 `json:"containerd_calls"`
	}
	require.NoError(t, json.Unmarshal(body, &s), "%s", body)
	return s.Calls
}

// callDiff is "Service/Method xN ..." for the calls made between two counts, and
// their total.
func callDiff(before, after map[string]uint64) (string, uint64) {
	var parts []string
	var total uint64
	for m, n := range after {
		if d := n - before[m]; d > 0 {
			short := m[strings.LastIndex(m[:strings.LastIndexByte(m, '/')], ".")+1:]
			parts = append(parts, fmt.Sprintf("%s x%d", short, d))
			total += d
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", "), total
}

// TestContainerdCallsPerPod counts the calls shimd makes to containerd for each CRI
// call of one pod's lifecycle (a pod with one container, as the kubelet runs it),
// logs them, and holds them to a budget: every call costs CPU in shimd and containerd,
// and a pod start waits for each. A change that adds calls to the path has to raise
// the budget on purpose.
func TestContainerdCallsPerPod(t *testing.T) {
	// The steps' budgets add up to more than the whole: a task's delete after its
	// exit is made by the exit's handler, in the stop or just after it. A container's
	// record in containerd's sandbox store, which keeps its exit across containerd's
	// restart (container/exit_keep.go), costs one call in CreateContainer and one in
	// RemoveContainer.
	const lifecycleBudget = 23
	requireRoot(t)
	sock := filepath.Join(t.TempDir(), "debug.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[debug]\naddress = %q\n", sock)}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	debug := debugClient(sock)

	lifecycle := func(check bool) {
		cfg := podConfig("calls")
		cfg.LogDirectory = t.TempDir()
		pod := &podFixture{t: t, rs: rs, cfg: cfg, logDir: cfg.LogDirectory}
		t.Cleanup(func() { // a failed step leaves no pod behind (Stop and Remove are idempotent)
			if pod.id != "" {
				stopRemove(t, rs, pod.id)
			}
		})
		var cid string
		ctx := ctxT(t, 2*time.Minute)
		steps := []struct {
			name   string
			budget uint64
			do     func()
		}{
			{"RunPodSandbox", 6, func() { pod.id = runPod(t, rs, cfg) }},
			{"CreateContainer", 3, func() { cid = pod.create(pod.container("main", "sleep", "3600")) }},
			{"StartContainer", 2, func() { pod.start(cid) }},
			{"StopContainer", 3, func() {
				_, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 0})
				require.NoError(t, err)
			}},
			{"RemoveContainer", 4, func() {
				_, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid})
				require.NoError(t, err)
			}},
			{"StopPodSandbox", 3, func() {
				_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
				require.NoError(t, err)
			}},
			{"RemovePodSandbox", 4, func() {
				_, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.id})
				require.NoError(t, err)
			}},
		}
		var sum uint64
		for _, s := range steps {
			before := containerdCalls(t, debug)
			s.do()
			calls, n := callDiff(before, containerdCalls(t, debug))
			sum += n
			if check {
				t.Logf("%-16s %2d calls: %s", s.name, n, calls)
				require.LessOrEqual(t, n, s.budget, "%s made %d calls to containerd (%s), over its budget of %d", s.name, n, calls, s.budget)
			}
		}
		if check {
			t.Logf("one pod lifecycle: %d calls to containerd", sum)
			require.LessOrEqual(t, sum, uint64(lifecycleBudget), "one pod lifecycle made %d calls to containerd, over its budget of %d", sum, lifecycleBudget)
		}
	}
	lifecycle(false) // warm up: the first pod pays for connections and caches (the image's users)
	lifecycle(true)
}
