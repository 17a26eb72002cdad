//go:build integration

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// slowDelay is what each write, fsync, create, mkdir, rename and unlink in shimd's
// root dir takes in TestSlowRootDir; cutShort is a client deadline shorter than a
// pod's or a container's writes there.
const (
	slowDelay = 150 * time.Millisecond
	cutShort  = 300 * time.Millisecond
)

// onSlowFS moves dir, one of shimd's directories, onto a harness.SlowFS with delay
// per changing operation, as onTmpfs does: shimd is stopped, the contents copied to
// the backing dir, the filesystem mounted and shimd started again.
func onSlowFS(t *testing.T, env *harness.Env, dir string, delay time.Duration) *harness.SlowFS {
	t.Helper()
	if why := harness.SlowFSAvailable(); why != "" {
		t.Skip(why)
	}
	env.Shimd.Stop()
	backing := t.TempDir()
	require.NoError(t, exec.Command("cp", "-a", dir+"/.", backing).Run())
	sfs := harness.MountSlowFS(t, dir, backing, delay)
	env.Shimd.Start(t)
	return sfs
}

// cutShortCall calls rpc with a deadline (cutShort) shorter than the slow disk's
// writes, as a kubelet with a short timeout: it answers DeadlineExceeded (and "") or
// succeeds (and the id it made).
func cutShortCall(t *testing.T, what string, rpc func(ctx context.Context) (string, error)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cutShort)
	defer cancel()
	t0 := time.Now()
	id, err := rpc(ctx)
	t.Logf("%s with a %v deadline: %v after %v", what, cutShort, err, time.Since(t0).Round(time.Millisecond))
	if err != nil {
		require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%s cut short: %v", what, err)
	}
	return id
}

// retryLikeKubelet calls rpc again with a kubelet's deadline (2 minutes), as the
// kubelet does on its next sync after a call it gave up on; the retry must succeed,
// also while the first call is still at work. It returns the id the retry got.
func retryLikeKubelet(t *testing.T, what string, rpc func(ctx context.Context) (string, error)) string {
	t.Helper()
	t0 := time.Now()
	id, err := rpc(ctxT(t, 2*time.Minute))
	require.NoError(t, err, "%s: the kubelet's retry", what)
	t.Logf("%s: the retry succeeded after %v", what, time.Since(t0).Round(time.Millisecond))
	return id
}

// runPodCall and createCall are RunPodSandbox and CreateContainer as functions of a
// context that return the id made.
func runPodCall(rs runtimeapi.RuntimeServiceClient, cfg *runtimeapi.PodSandboxConfig) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		resp, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		return resp.GetPodSandboxId(), err
	}
}

func createCall(rs runtimeapi.RuntimeServiceClient, podID string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		resp, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		return resp.GetContainerId(), err
	}
}

// podsNamed are the listed pods whose metadata name is name.
func podsNamed(t *testing.T, rs runtimeapi.RuntimeServiceClient, name string) []*runtimeapi.PodSandbox {
	t.Helper()
	var out []*runtimeapi.PodSandbox
	for _, p := range listPods(t, rs, nil) {
		if p.Metadata.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// containersNamed are the listed containers of pod podID whose metadata name is name.
func containersNamed(t *testing.T, rs runtimeapi.RuntimeServiceClient, podID, name string) []*runtimeapi.Container {
	t.Helper()
	var out []*runtimeapi.Container
	for _, c := range listContainers(t, rs) {
		if c.PodSandboxId == podID && c.Metadata.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// requireRootDirMatchesLists checks that shimd's root dir holds files of exactly the
// pods and containers it lists: nothing half-made is left there.
func requireRootDirMatchesLists(t *testing.T, rs runtimeapi.RuntimeServiceClient, root string) {
	t.Helper()
	names := func(dir string) []string {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		out := []string{}
		for _, e := range entries {
			out = append(out, e.Name())
		}
		sort.Strings(out)
		return out
	}
	pods, ctrs := []string{}, []string{}
	for _, p := range listPods(t, rs, nil) {
		pods = append(pods, p.Id)
	}
	for _, c := range listContainers(t, rs) {
		ctrs = append(ctrs, c.Id)
	}
	sort.Strings(pods)
	sort.Strings(ctrs)
	require.Equal(t, pods, names("sandboxes"), "pod dirs in the root dir against the pods listed")
	require.Equal(t, ctrs, names("containers"), "container dirs in the root dir against the containers listed")
}

// snapshotStates maps each listed pod and container id to its state.
func snapshotStates(t *testing.T, rs runtimeapi.RuntimeServiceClient) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range listPods(t, rs, nil) {
		out[p.Id] = p.State.String()
	}
	for _, c := range listContainers(t, rs) {
		out[c.Id] = c.State.String()
	}
	return out
}

// waitPending waits until the slow disk is busy with an operation ("write", "rename",
// ...) on a path under prefix, and returns it.
func waitPending(t *testing.T, sfs *harness.SlowFS, opName, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, op := range sfs.Pending() {
			if name, path, _ := strings.Cut(op, " "); name == opName && strings.HasPrefix(path, prefix) {
				return op
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no slow %s under %s within a minute", opName, prefix)
	return ""
}

// shimd's root dir (pod files, container status records) on a disk that takes
// slowDelay for each change. What a kubelet sees: pods and containers run, just
// slower; calls cut short by the client's deadline, and their retries, make one pod
// and one container each, never two, never half of one; a kill -9 of shimd in the
// middle of a slow write is recovered from; and everything removes to no leaks.
func TestSlowRootDir(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	root := env.Shimd.RootDir()
	sfs := onSlowFS(t, env, root, slowDelay)
	rs := env.Shimd.Runtime(t)
	waitRuntimeReady(t, rs)

	// (1) A pod with two containers runs, with the right statuses, just slower.
	timed := func(what string, f func()) {
		t.Helper()
		t0, ops := time.Now(), sfs.Delayed()
		f()
		t.Logf("%s: %v, %d slow operations", what, time.Since(t0).Round(time.Millisecond), sfs.Delayed()-ops)
	}
	var p *podFixture
	timed("RunPodSandbox", func() { p = newPod(t, rs, "slow") })
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, p.id).State)
	var ids []string
	for _, name := range []string{"first", "second"} {
		var id string
		timed("CreateContainer "+name, func() { id = p.create(p.container(name, "sleep", "3600")) })
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, containerStatus(t, rs, id).State)
		timed("StartContainer "+name, func() { p.start(id) })
		ids = append(ids, id)
	}
	for i, id := range ids {
		st := containerStatus(t, rs, id)
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, st.State, "container %d", i)
		require.Equal(t, []string{"first", "second"}[i], st.Metadata.Name)
		require.NotZero(t, st.StartedAt)
		// The pod's files, bind-mounted from the slow disk.
		out, err := execSync(t, rs, id, 10, "cat", "/etc/hostname", "/etc/resolv.conf")
		require.NoError(t, err)
		require.Equal(t, "slow\nsearch e2e.svc\nnameserver 198.18.255.53\n", string(out.Stdout))
	}
	require.Len(t, listContainers(t, rs), 2)

	// (2) Calls cut short by the client, then retried as a kubelet does.
	cutCfg := podConfig("slow-cut")
	cutCfg.LogDirectory = t.TempDir()
	first := cutShortCall(t, "RunPodSandbox", runPodCall(rs, cutCfg))
	cutID := retryLikeKubelet(t, "RunPodSandbox", runPodCall(rs, cutCfg))
	if first != "" {
		require.Equal(t, first, cutID, "the retry made another pod")
	}
	listed := podsNamed(t, rs, "slow-cut")
	require.Len(t, listed, 1, "pods of the cut-short RunPodSandbox and its retry")
	require.Equal(t, cutID, listed[0].Id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, listed[0].State)
	cutPod := &podFixture{t: t, rs: rs, id: cutID, cfg: cutCfg, logDir: cutCfg.LogDirectory}

	ctrCfg := cutPod.container("cut", "sleep", "3600")
	firstCtr := cutShortCall(t, "CreateContainer", createCall(rs, cutID, cutCfg, ctrCfg))
	cutCtr := retryLikeKubelet(t, "CreateContainer", createCall(rs, cutID, cutCfg, ctrCfg))
	if firstCtr != "" {
		require.Equal(t, firstCtr, cutCtr, "the retry made another container")
	}
	ctrs := containersNamed(t, rs, cutID, "cut")
	require.Len(t, ctrs, 1, "containers of the cut-short CreateContainer and its retry")
	require.Equal(t, cutCtr, ctrs[0].Id)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, ctrs[0].State)
	timed("StartContainer of the retried container", func() { cutPod.start(cutCtr) })
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, cutCtr).State)

	// A cut-short call that is never retried: what it made shows up in the lists
	// (the kubelet then removes it), or nothing does.
	orphanCfg := podConfig("slow-orphan")
	orphanCfg.LogDirectory = t.TempDir()
	cutShortCall(t, "RunPodSandbox never retried", runPodCall(rs, orphanCfg))
	require.Eventually(t, func() bool { return len(podsNamed(t, rs, "slow-orphan")) == 1 }, time.Minute, 100*time.Millisecond,
		"the pod of a cut-short RunPodSandbox is not listed")
	orphanID := podsNamed(t, rs, "slow-orphan")[0].Id
	cutShortCall(t, "CreateContainer never retried", createCall(rs, orphanID, orphanCfg, cutPod.container("orphan", "true")))
	require.Eventually(t, func() bool { return len(containersNamed(t, rs, orphanID, "orphan")) == 1 }, time.Minute, 100*time.Millisecond,
		"the container of a cut-short CreateContainer is not listed")
	orphanCtr := containersNamed(t, rs, orphanID, "orphan")[0]
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, orphanCtr.State)
	_, err := rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: orphanCtr.Id})
	require.NoError(t, err)
	stopRemove(t, rs, orphanID)
	require.Empty(t, podsNamed(t, rs, "slow-orphan"))
	requireRootDirMatchesLists(t, rs, root)

	// (3) kill -9 of shimd while it waits on a slow write, of a pod's files and of a
	// container's status record (the kubelet's call fails Unavailable); after the restart, what is listed is whole and
	// what was there before is unchanged.
	before := snapshotStates(t, rs)
	crashCfg := podConfig("slow-crash")
	crashCfg.LogDirectory = t.TempDir()
	runc := inBackground(func(ctx context.Context) error { _, err := runPodCall(rs, crashCfg)(ctx); return err })
	op := waitPending(t, sfs, "write", "sandboxes/")
	env.Shimd.Kill9()
	t.Logf("kill -9 of shimd during %q; RunPodSandbox: %v", op, <-runc)
	t0 := time.Now()
	env.Shimd.Start(t)
	waitReady(t, rs)
	t.Logf("shimd recovered in %v", time.Since(t0).Round(time.Millisecond))
	for _, p := range podsNamed(t, rs, "slow-crash") {
		require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, p.State, "a pod cut short by the crash is listed, but not READY")
	}
	requireRootDirMatchesLists(t, rs, root)
	after := snapshotStates(t, rs)
	for id, state := range before {
		require.Equal(t, state, after[id], "pod or container %s after the restart", id)
	}
	crashID := retryLikeKubelet(t, "RunPodSandbox after the crash", runPodCall(rs, crashCfg))
	listed = podsNamed(t, rs, "slow-crash")
	require.Len(t, listed, 1)
	require.Equal(t, crashID, listed[0].Id)

	before = snapshotStates(t, rs)
	crashCtr := cutPod.container("crash", "sleep", "3600")
	createc := inBackground(func(ctx context.Context) error {
		_, err := createCall(rs, crashID, crashCfg, crashCtr)(ctx)
		return err
	})
	// The atomic replace of the status record: its temp file is written, the rename
	// not done when shimd dies (the disk finishes it after).
	op = waitPending(t, sfs, "rename", "containers/")
	env.Shimd.Kill9()
	t.Logf("kill -9 of shimd during %q; CreateContainer: %v", op, <-createc)
	env.Shimd.Start(t)
	waitReady(t, rs)
	for _, c := range containersNamed(t, rs, crashID, "crash") {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, c.State, "a container cut short by the crash")
	}
	requireRootDirMatchesLists(t, rs, root)
	after = snapshotStates(t, rs)
	for id, state := range before {
		require.Equal(t, state, after[id], "pod or container %s after the restart", id)
	}
	crashCtrID := retryLikeKubelet(t, "CreateContainer after the crash", createCall(rs, crashID, crashCfg, crashCtr))
	ctrs = containersNamed(t, rs, crashID, "crash")
	require.Len(t, ctrs, 1)
	require.Equal(t, crashCtrID, ctrs[0].Id)
	crashPod := &podFixture{t: t, rs: rs, id: crashID, cfg: crashCfg, logDir: crashCfg.LogDirectory}
	crashPod.start(crashCtrID)
	for _, id := range append(ids, cutCtr, crashCtrID) {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
		_, err := execSync(t, rs, id, 10, "true")
		require.NoError(t, err)
	}

	// (4) Everything stops and goes, on the slow disk; then no leaks.
	for _, p := range listPods(t, rs, nil) {
		timed("StopPodSandbox+RemovePodSandbox "+p.Metadata.Name, func() { stopRemove(t, rs, p.Id) })
	}
	require.Empty(t, listContainers(t, rs))
	requireRootDirMatchesLists(t, rs, root)
	t.Logf("%d slow operations in all", sfs.Delayed())
	env.Shimd.Stop()
	require.NoError(t, sfs.Unmount())
	env.Shimd.Start(t)
	env.CheckNoLeaks(t)
}
