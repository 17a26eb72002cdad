//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// kill -9 of shimd with pods present: every pod comes back with the same id, state and
// IP; a pod whose pause process died meanwhile is NOTREADY; all can be stopped and removed.
func TestKill9RestartRecoversSandboxes(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	var ids []string
	before := map[string]*runtimeapi.PodSandboxStatus{}
	for _, name := range []string{"one", "two", "three"} {
		cfg := podConfig(name)
		if name == "two" {
			cfg = pausePodConfig(name) // its pause process is killed below
		}
		id := runPod(t, rs, cfg)
		ids = append(ids, id)
		before[id] = podStatus(t, rs, id)
	}
	_, err := rs.StopPodSandbox(ctxT(t, time.Minute), &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[2]})
	require.NoError(t, err)
	before[ids[2]] = podStatus(t, rs, ids[2])

	env.Shimd.Kill9()
	// While shimd is down, the pause process of pod "two" dies.
	killPause(t, env, ids[1])
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	waitReady(t, rs)

	require.Len(t, listPods(t, rs, nil), 3)
	for i, id := range ids {
		st := podStatus(t, rs, id)
		require.Equal(t, before[id].Network.Ip, st.Network.Ip)
		require.Equal(t, before[id].CreatedAt, st.CreatedAt)
		require.Equal(t, before[id].Metadata.Name, st.Metadata.Name)
		want := runtimeapi.PodSandboxState_SANDBOX_READY
		if i > 0 {
			want = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}
		require.Equal(t, want, st.State, "pod %d", i)
	}
	for _, id := range ids {
		stopRemove(t, rs, id)
	}
}

// killPause kills the pause process of a sandbox with SIGKILL, by its task's pid.
func killPause(t *testing.T, env *harness.Env, id string) {
	t.Helper()
	cl := env.Containerd.Client(t)
	ctx := namespaces.WithNamespace(context.Background(), env.Namespace)
	c, err := cl.LoadContainer(ctx, id)
	require.NoError(t, err)
	task, err := c.Task(ctx, nil)
	require.NoError(t, err)
	exitc, err := task.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(int(task.Pid()), syscall.SIGKILL))
	select {
	case <-exitc:
	case <-time.After(30 * time.Second):
		t.Fatal("pause did not exit")
	}
}

// Killing shimd at any point of RunPodSandbox leaves, after the restart, either a
// whole pod or nothing: the leak check after cleanup proves nothing half-made stayed.
func TestKill9DuringRunLeavesNothingHalfMade(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	for i, delay := range []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond} {
		rs := env.Shimd.Runtime(t)
		go func(cfg *runtimeapi.PodSandboxConfig) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		}(podConfig("crash"))
		time.Sleep(delay)
		rs = restartShimd(t, env)
		for _, p := range listPods(t, rs, nil) {
			st := podStatus(t, rs, p.Id)
			if st.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				requireInSubnet(t, env, st.Network.Ip)
			}
			stopRemove(t, rs, p.Id)
		}
		entries, _ := os.ReadDir(env.Shimd.NetnsDir())
		require.Empty(t, entries, "round %d: netns left behind", i)
	}
}

// containerd restarts: while it is down Status says RuntimeReady=false and RPCs fail
// with Unavailable; afterwards shimd works again without a restart of its own.
func TestContainerdRestart(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	id := runPod(t, rs, podConfig("survivor"))

	env.Containerd.Stop()
	st, err := rs.Status(ctxT(t, 30*time.Second), &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	require.False(t, st.Status.Conditions[0].Status, "RuntimeReady while containerd is down")
	require.NotEmpty(t, st.Status.Conditions[0].Reason)

	env.Containerd.Restart(t)
	waitRuntimeReady(t, rs)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, id).State)
	id2 := runPod(t, rs, podConfig("after"))
	stopRemove(t, rs, id)
	stopRemove(t, rs, id2)
}

// After a long outage of containerd, shimd reaches it again within its reconnect
// backoff (at most 0.5 s) of its return, not after the containerd client's default
// backoff, which grows to 10 s and answered Unavailable for that long although
// containerd was back (TestCrashSoak's cleanup met it).
func TestContainerdBackAfterLongOutage(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	is := env.Shimd.Images(t)
	waitReady(t, env.Shimd.Runtime(t))
	_, err := is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{})
	require.NoError(t, err)

	env.Containerd.Kill()
	// shimd answers ListImages from its cache while containerd's events flow
	// (image/store.go) and learns of the loss when the event stream breaks, a moment
	// after the kill (CI once got the cached list 2 ms before): from then on it
	// answers Unavailable.
	require.Eventually(t, func() bool {
		_, err := is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{})
		return status.Code(err) == codes.Unavailable
	}, 5*time.Second, 10*time.Millisecond, "ListImages once containerd is gone")
	// The client's default backoff (1 s, x1.6, up to 10 s) tries again at about 1,
	// 2.6, 5.2, 9.3, 15.8 and 25.8 s after the loss: containerd's return after 19 s
	// falls into a gap of about 7 s.
	for end := time.Now().Add(19 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		_, err := is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{})
		require.Equal(t, codes.Unavailable, status.Code(err), "ListImages while containerd is down: %v", err)
	}
	env.Containerd.Restart(t)
	back := time.Now()
	for {
		_, err := is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{})
		if err == nil {
			break
		}
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.Less(t, time.Since(back), 2500*time.Millisecond,
			"shimd still cannot reach containerd %s after it answered again: %v", time.Since(back), err)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("shimd reached containerd %s after its return", time.Since(back).Round(time.Millisecond))
}

// crictl, as an operator uses it.
func TestCrictlPods(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	cfg := map[string]any{
		"metadata":      map[string]any{"name": "crictl-pod", "namespace": "e2e", "uid": "crictl-uid", "attempt": 1},
		"hostname":      "crictl-pod",
		"log_directory": "/tmp",
		"labels":        map[string]string{"via": "crictl"},
		"linux":         map[string]any{},
	}
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "pod.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	out, err := env.Shimd.Crictl(t, "runp", path)
	require.NoError(t, err, out)
	id := strings.TrimSpace(out)
	require.Len(t, id, 64)

	out, err = env.Shimd.Crictl(t, "pods", "--label", "via=crictl", "-q")
	require.NoError(t, err, out)
	require.Equal(t, id, strings.TrimSpace(out))

	out, err = env.Shimd.Crictl(t, "inspectp", id)
	require.NoError(t, err, out)
	var inspect struct {
		Status struct {
			State   string `json:"state"`
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &inspect), out)
	require.Equal(t, "SANDBOX_READY", inspect.Status.State)
	requireInSubnet(t, env, inspect.Status.Network.IP)

	out, err = env.Shimd.Crictl(t, "info")
	require.NoError(t, err, out)
	require.Contains(t, out, `"RuntimeReady"`)

	for i := 0; i < 2; i++ {
		out, err = env.Shimd.Crictl(t, "stopp", id)
		require.NoError(t, err, out)
	}
	out, err = env.Shimd.Crictl(t, "rmp", id)
	require.NoError(t, err, out)
	out, err = env.Shimd.Crictl(t, "pods", "-q")
	require.NoError(t, err, out)
	require.Empty(t, strings.TrimSpace(out))
}
