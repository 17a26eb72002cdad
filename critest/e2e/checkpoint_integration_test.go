//go:build integration

package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// counterScript counts in a shell variable, one number a tenth of a second, to
// stdout and into /count in the writable layer: after a restore it goes on from
// where it was, which only a restored process can. /count is replaced by a rename,
// never written in place: `echo $i > /count` truncates the file before it writes,
// and a checkpoint (which freezes the task) or a reader that comes between the two
// finds it empty (a CI run's TestCheckpointRestoreContainer read "" from the
// checkpoint's rootfs-diff.tar).
const counterScript = `i=0; while true; do i=$((i+1)); echo "n=$i"; echo $i > /count.new; mv /count.new /count; sleep 0.1; done`

// checkpointEnv is a root test's environment with busybox pulled, skipped where CRIU
// does not work.
func checkpointEnv(t *testing.T) (*harness.Env, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	requireRoot(t)
	requireCRIU(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	return env, env.Shimd.Runtime(t)
}

func requireCRIU(t *testing.T) {
	t.Helper()
	out, err := exec.Command("criu", "check").CombinedOutput()
	if err != nil {
		t.Skipf("criu check: %v: %s (hack/tools.sh criu builds CRIU 4.1.1)", err, out)
	}
}

// counts are the numbers of the "n=N" lines of a container log, in order.
func counts(t *testing.T, path string) []int {
	t.Helper()
	var ns []int
	for _, l := range strings.Split(readFile(t, path), "\n") {
		if i := strings.Index(l, "n="); i >= 0 {
			if v, err := strconv.Atoi(strings.TrimSpace(l[i+2:])); err == nil {
				ns = append(ns, v)
			}
		}
	}
	return ns
}

// lastCount is the last count of a container log, -1 if none.
func lastCount(t *testing.T, path string) int {
	if ns := counts(t, path); len(ns) > 0 {
		return ns[len(ns)-1]
	}
	return -1
}

// tarNames lists the entries of a tar file (or of a tar inside it, by name).
func tarNames(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	names := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		require.NoError(t, err)
		var data []byte
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 && !strings.Contains(h.Name, "checkpoint/") {
			data, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
		names[strings.TrimPrefix(h.Name, "./")] = data
	}
}

// CheckpointContainer writes an archive in containerd's layout and leaves the
// container running; CreateContainer from that archive in another pod restores the
// process, which counts on from where it was, with its writable layer.
func TestCheckpointRestoreContainer(t *testing.T) {
	env, rs := checkpointEnv(t)
	checkpointRestoreContainer(t, env, rs)
}

// checkpointRestoreContainer checkpoints a counter and restores it, from the archive
// and from an image made of it; the pods are removed and no leak is left.
func checkpointRestoreContainer(t *testing.T, env *harness.Env, rs runtimeapi.RuntimeServiceClient) {
	p := newPod(t, rs, "cp-source")
	id := p.run(p.container("counter", "sh", "-c", counterScript))
	logPath := filepath.Join(p.logDir, "counter.log")
	waitLog(t, logPath, "n=20\n")

	dir := t.TempDir()
	location := filepath.Join(dir, "counter.tar")
	start := time.Now()
	_, err := rs.CheckpointContainer(ctxT(t, 2*time.Minute), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 60})
	require.NoError(t, err)
	t.Logf("checkpoint of a busybox counter: %s", time.Since(start).Round(time.Millisecond))
	atCheckpoint := lastCount(t, logPath)

	// Still running, still counting.
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	waitLog(t, logPath, "n="+strconv.Itoa(atCheckpoint+5)+"\n")

	f, err := os.Open(location)
	require.NoError(t, err)
	entries := tarNames(t, f)
	f.Close()
	for _, name := range []string{"checkpoint/", "config.dump", "spec.dump", "status.dump", "rootfs-diff.tar", "container.log", "dump.log"} {
		found := false
		for e := range entries {
			if e == name || strings.HasPrefix(e, name) {
				found = true
			}
		}
		require.True(t, found, "archive lacks %s; has %v", name, entries)
	}
	require.Contains(t, string(entries["config.dump"]), `"rootfsImageName":"`+busyboxImage+`"`)
	diff := tarNames(t, strings.NewReader(string(entries["rootfs-diff.tar"])))
	require.Contains(t, diff, "count", "the writable layer's /count is not in rootfs-diff.tar: %v", diff)
	// The layer is read while the task is paused: /count is the process's count then.
	counted, err := strconv.Atoi(strings.TrimSpace(string(diff["count"])))
	require.NoError(t, err)
	require.LessOrEqual(t, counted, atCheckpoint)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, left, 1, "the checkpoint left files beside the archive: %v", left)

	// Restore into another pod: the count goes on from the checkpoint's.
	p2 := newPod(t, rs, "cp-target")
	cfg := p2.container("counter", "sh", "-c", counterScript)
	cfg.Image = &runtimeapi.ImageSpec{Image: location}
	restored := p2.create(cfg)
	st := containerStatus(t, rs, restored)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, st.State)
	require.Equal(t, busyboxImage, st.Image.GetUserSpecifiedImage(), "a restored container reports the checkpointed image")
	start = time.Now()
	p2.start(restored)
	t.Logf("restore (start) of the busybox counter: %s", time.Since(start).Round(time.Millisecond))
	restoredLog := filepath.Join(p2.logDir, "counter.log")
	deadline := time.Now().Add(30 * time.Second)
	for lastCount(t, restoredLog) < counted+3 {
		require.True(t, time.Now().Before(deadline), "the restored counter did not go on; log:\n%s", readFile(t, restoredLog))
		time.Sleep(100 * time.Millisecond)
	}
	// The loop prints n=i, then puts i in /count: paused between the two, /count
	// is one behind what was printed. Either way the restored process prints the
	// count after the checkpoint's next.
	first := counts(t, restoredLog)[0]
	t.Logf("/count %d at the checkpoint, %d printed after it; the restored counter printed n=%d first", counted, atCheckpoint, first)
	require.Contains(t, []int{counted + 1, counted + 2}, first, "the restored counter did not go on from the checkpoint's %d", counted)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, restored).State)
	// Its writable layer is the checkpoint's: /count is there at once, and counting.
	out, err := execSync(t, rs, restored, 10, "cat", "/count")
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, atCheckpoint)
	// The original runs on beside it, and crictl checkpoints it as a user would.
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	byCrictl := filepath.Join(dir, "crictl.tar")
	out2, err := env.Shimd.Crictl(t, "checkpoint", "--export="+byCrictl, id)
	require.NoError(t, err, "crictl checkpoint: %s", out2)
	fi, err := os.Stat(byCrictl)
	require.NoError(t, err)
	t.Logf("crictl checkpoint --export: %q, %d bytes", strings.TrimSpace(out2), fi.Size())
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)

	// The kubelet's way: an OCI image made of the archive (one layer holding its
	// files, the org.criu.checkpoint.container.name annotation, as buildah and
	// checkpointctl make it), brought in by another client, restored by reference.
	ref := harness.ImportCheckpointImage(t, env, location, "localhost/checkpoint/counter:v1")
	p3 := newPod(t, rs, "cp-image")
	cfg3 := p3.container("counter", "sh", "-c", counterScript)
	cfg3.Image = &runtimeapi.ImageSpec{Image: ref}
	var fromImage string
	require.Eventually(t, func() bool {
		resp, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: p3.id, Config: cfg3, SandboxConfig: p3.cfg})
		if status.Code(err) == codes.NotFound {
			return false // the import is not seen yet
		}
		require.NoError(t, err)
		fromImage = resp.ContainerId
		return true
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, busyboxImage, containerStatus(t, rs, fromImage).Image.GetUserSpecifiedImage())
	p3.start(fromImage)
	imageLog := filepath.Join(p3.logDir, "counter.log")
	deadline = time.Now().Add(30 * time.Second)
	for lastCount(t, imageLog) < counted+3 {
		require.True(t, time.Now().Before(deadline), "the counter restored from an image did not go on; log:\n%s", readFile(t, imageLog))
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, []int{counted + 1, counted + 2}, counts(t, imageLog)[0], "restored from the image")

	stopRemove(t, rs, p3.id)
	stopRemove(t, rs, p2.id)
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// Bad checkpoint and restore requests get clear codes and leave nothing behind.
func TestCheckpointRestoreRefusals(t *testing.T) {
	env, rs := checkpointEnv(t)
	p := newPod(t, rs, "cp-refusals")
	created := p.create(p.container("created", "sleep", "3600"))
	dir := t.TempDir()
	ctx := ctxT(t, time.Minute)
	code := func(err error) codes.Code { return status.Code(err) }

	_, err := rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: "nope", Location: filepath.Join(dir, "a.tar")})
	require.Equal(t, codes.NotFound, code(err), "%v", err)
	_, err = rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: created, Location: filepath.Join(dir, "a.tar")})
	require.Equal(t, codes.FailedPrecondition, code(err), "%v", err)
	require.Contains(t, err.Error(), "only a running container")
	for _, loc := range []string{"", "a.tar", dir + "/../x/a.tar", dir + "/missing/a.tar", dir} {
		_, err = rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: created, Location: loc})
		require.Equal(t, codes.InvalidArgument, code(err), "location %q: %v", loc, err)
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)

	before := listContainers(t, rs)
	notArchive := filepath.Join(dir, "not-a-checkpoint.tar")
	require.NoError(t, os.WriteFile(notArchive, []byte("hello"), 0o600))
	for image, want := range map[string]codes.Code{
		filepath.Join(dir, "missing.tar"): codes.NotFound,
		notArchive:                        codes.InvalidArgument,
		dir:                               codes.InvalidArgument,
	} {
		cfg := p.container("restored", "sleep", "3600")
		cfg.Image = &runtimeapi.ImageSpec{Image: image}
		_, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
		require.Equal(t, want, code(err), "image %s: %v", image, err)
	}
	require.Len(t, listContainers(t, rs), len(before), "a refused restore left a container")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// hogContainer runs, in a new pod of a new environment, a container holding mib MiB
// of touched memory that prints "tick" ten times a second, once it is "ready".
func hogContainer(t *testing.T, podName string, mib int) (*harness.Env, runtimeapi.RuntimeServiceClient, *podFixture, string, string) {
	t.Helper()
	env, rs := checkpointEnv(t)
	p := newPod(t, rs, podName)
	prog := fmt.Sprintf(`BEGIN { s = sprintf("%%%ds", ""); print "ready"; fflush(); while (1) { print "tick"; fflush(); system("sleep 0.1") } }`, mib<<20)
	id := p.run(p.container("hog", "awk", prog))
	logPath := filepath.Join(p.logDir, "hog.log")
	waitLog(t, logPath, "ready")
	return env, rs, p, id, logPath
}

// A checkpoint whose timeout ends before the dump gets DeadlineExceeded at once; the
// dump goes on, is thrown away, and the container runs on. No archive appears; a
// second checkpoint waits its turn (FailedPrecondition while the first dumps) and
// then succeeds.
func TestCheckpointTimeout(t *testing.T) {
	// 1 GiB of touched memory: its dump takes longer than the 1 s timeout. (A CI
	// run once dumped 256 MiB in 802 ms, within the timeout: the checkpoint
	// succeeded, and the test failed on its premise.)
	env, rs, p, id, _ := hogContainer(t, "cp-timeout", 1024)
	dir := t.TempDir()
	location := filepath.Join(dir, "hog.tar")
	start := time.Now()
	_, err := rs.CheckpointContainer(ctxT(t, time.Minute), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 1})
	took := time.Since(start)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	require.Less(t, took, 5*time.Second, "the caller waited for the dump")
	t.Logf("timeout 1 s: %s after %s", err, took.Round(time.Millisecond))

	var second time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for {
		start := time.Now()
		_, err = rs.CheckpointContainer(ctxT(t, 2*time.Minute), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 120})
		if status.Code(err) != codes.FailedPrecondition {
			second = time.Since(start)
			break
		}
		require.Contains(t, err.Error(), "in progress")
		require.True(t, time.Now().Before(deadline), "the thrown-away dump never ended")
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, err)
	t.Logf("second checkpoint of 1 GiB: %s", second.Round(time.Millisecond))
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, left, 1, "files beside the archive: %v", left)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	_, err = execSync(t, rs, id, 10, "true")
	require.NoError(t, err, "the container does not run on after its checkpoints")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// dirDigest is a listing of every file under dir with its size and mode, to see
// that a restore left a checkpoint as it was.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	}))
	return b.String()
}

// CheckpointPod takes two running counters of a pod in one cut into an empty
// directory and leaves them running; RestorePod makes a new pod of them, CREATED,
// and their StartContainer restores them: each counts on from its checkpoint. The
// checkpoint is not changed. Bad requests are refused with nothing left behind.
func TestCheckpointRestorePod(t *testing.T) {
	env, rs := checkpointEnv(t)
	p := newPod(t, rs, "pod-cp")
	script := func(name string) string { return strings.ReplaceAll(counterScript, "/count", "/"+name) }
	a := p.run(p.container("a", "sh", "-c", script("a")))
	b := p.run(p.container("b", "sh", "-c", script("b")))
	waitLog(t, filepath.Join(p.logDir, "a.log"), "n=10\n")
	waitLog(t, filepath.Join(p.logDir, "b.log"), "n=10\n")
	other := newPod(t, rs, "pod-cp-other")
	elsewhere := other.run(other.container("c", "sleep", "3600"))
	ctx := ctxT(t, 2*time.Minute)

	dir := t.TempDir()
	code := func(err error) codes.Code { return status.Code(err) }
	for name, req := range map[string]*runtimeapi.CheckpointPodRequest{
		"no containers":      {PodSandboxId: p.id, OutputPath: dir},
		"twice":              {PodSandboxId: p.id, OutputPath: dir, ContainerIds: []string{a, a}},
		"other pod's":        {PodSandboxId: p.id, OutputPath: dir, ContainerIds: []string{a, elsewhere}},
		"relative path":      {PodSandboxId: p.id, OutputPath: "cp", ContainerIds: []string{a}},
		"an option":          {PodSandboxId: p.id, OutputPath: dir, ContainerIds: []string{a}, Options: map[string]string{"tcp-established": "true"}},
		"missing output dir": {PodSandboxId: p.id, OutputPath: dir + "/missing", ContainerIds: []string{a}},
	} {
		_, err := rs.CheckpointPod(ctx, req)
		require.Equal(t, codes.InvalidArgument, code(err), "%s: %v", name, err)
	}
	_, err := rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: "nope", OutputPath: dir, ContainerIds: []string{a}})
	require.Equal(t, codes.NotFound, code(err), "%v", err)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)

	start := time.Now()
	_, err = rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: p.id, OutputPath: dir, ContainerIds: []string{a, b}})
	require.NoError(t, err)
	t.Logf("pod checkpoint of two counters: %s", time.Since(start).Round(time.Millisecond))
	for _, id := range []string{a, b} {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	}
	_, err = rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: p.id, OutputPath: dir, ContainerIds: []string{a}})
	require.Equal(t, codes.InvalidArgument, code(err), "a second checkpoint into a full directory: %v", err)
	before := dirDigest(t, dir)
	counted := map[string]int{}
	for i, name := range []string{"a", "b"} {
		diff, err := os.Open(filepath.Join(dir, "containers", strconv.Itoa(i), "rootfs-diff.tar"))
		require.NoError(t, err)
		files := tarNames(t, diff)
		diff.Close()
		counted[name], err = strconv.Atoi(strings.TrimSpace(string(files[name])))
		require.NoError(t, err, "%s: %v", name, files)
	}

	restoredCfg := podConfig("pod-cp-restored")
	restoredCfg.LogDirectory = t.TempDir()
	cfgOf := func(name string) *runtimeapi.ContainerConfig { return p.container(name, "sh", "-c", script(name)) }
	podsBefore := len(listPods(t, rs, nil))
	wrongImage := cfgOf("b")
	wrongImage.Image = &runtimeapi.ImageSpec{Image: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
	for name, req := range map[string]*runtimeapi.RestorePodRequest{
		"a missing config": {CheckpointPath: dir, Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a")}},
		"an unknown name":  {CheckpointPath: dir, Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a"), cfgOf("b"), cfgOf("c")}},
		"no checkpoint":    {CheckpointPath: t.TempDir(), Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a")}},
		"an option":        {CheckpointPath: dir, Config: restoredCfg, Options: map[string]string{"x": "y"}, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a"), cfgOf("b")}},
		"a relative path":  {CheckpointPath: "cp", Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a"), cfgOf("b")}},
		"the wrong image":  {CheckpointPath: dir, Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a"), wrongImage}},
		"another command":  {CheckpointPath: dir, Config: restoredCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("a"), p.container("b", "sleep", "3600")}},
	} {
		_, err := rs.RestorePod(ctx, req)
		require.Contains(t, []codes.Code{codes.InvalidArgument, codes.NotFound}, code(err), "%s: %v", name, err)
		require.Len(t, listPods(t, rs, nil), podsBefore, "%s: a refused restore left a pod", name)
	}

	start = time.Now()
	resp, err := rs.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: restoredCfg,
		ContainerConfigs: []*runtimeapi.ContainerConfig{cfgOf("b"), cfgOf("a")}})
	require.NoError(t, err)
	t.Logf("RestorePod: %s", time.Since(start).Round(time.Millisecond))
	require.NotEmpty(t, resp.PodSandboxId)
	require.Len(t, resp.RestoredContainers, 2)
	require.Equal(t, "b", resp.RestoredContainers[0].Name)
	require.Equal(t, "a", resp.RestoredContainers[1].Name)
	for _, rc := range resp.RestoredContainers {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_CREATED, containerStatus(t, rs, rc.ContainerId).State)
	}
	start = time.Now()
	for _, rc := range resp.RestoredContainers {
		_, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: rc.ContainerId})
		require.NoError(t, err, "start %s", rc.Name)
	}
	t.Logf("start of the two restored containers: %s", time.Since(start).Round(time.Millisecond))
	for _, rc := range resp.RestoredContainers {
		logPath := filepath.Join(restoredCfg.LogDirectory, rc.Name+".log")
		deadline := time.Now().Add(30 * time.Second)
		for lastCount(t, logPath) < counted[rc.Name]+3 {
			require.True(t, time.Now().Before(deadline), "%s did not count on; log:\n%s", rc.Name, readFile(t, logPath))
			time.Sleep(100 * time.Millisecond)
		}
		first := counts(t, logPath)[0]
		t.Logf("%s: /%s %d at the checkpoint, restored counter printed n=%d first", rc.Name, rc.Name, counted[rc.Name], first)
		require.Contains(t, []int{counted[rc.Name] + 1, counted[rc.Name] + 2}, first, rc.Name)
	}
	require.Equal(t, before, dirDigest(t, dir), "the restore changed the checkpoint")
	for _, id := range []string{a, b} {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	}
	stopRemove(t, rs, resp.PodSandboxId)
	stopRemove(t, rs, other.id)
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// shimd killed in the middle of a checkpoint (the task is paused while it is
// dumped): after the restart the container runs, not paused, and its checkpoint
// leaves nothing behind.
func TestKill9DuringCheckpointResumesTheTask(t *testing.T) {
	env, rs, p, id, logPath := hogContainer(t, "cp-kill9", 256)
	dir := t.TempDir()
	errc := inBackground(func(ctx context.Context) error {
		_, err := rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "hog.tar")})
		return err
	})
	// Wait until the task is paused, then kill shimd.
	ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Shimd.Namespace())
	require.Eventually(t, func() bool {
		resp, err := env.Containerd.Client(t).TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
		return err == nil && resp.Process.Status == tasktypes.Status_PAUSED
	}, 30*time.Second, 10*time.Millisecond, "the checkpoint never paused the task")
	env.Shimd.Kill9()
	require.Error(t, <-errc)
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	require.Eventually(t, func() bool {
		resp, err := env.Containerd.Client(t).TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
		return err == nil && resp.Process.Status == tasktypes.Status_RUNNING
	}, 30*time.Second, 50*time.Millisecond, "the task is not running after the restart")
	ticks := strings.Count(readFile(t, logPath), "tick")
	require.Eventually(t, func() bool { return strings.Count(readFile(t, logPath), "tick") > ticks+3 }, 10*time.Second, 100*time.Millisecond,
		"the container does not run on after the restart")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "the cut-short checkpoint left files beside its location")
	_, err = os.Stat(filepath.Join(env.Shimd.RootDir(), "containers", id, "checkpoint-work"))
	require.True(t, os.IsNotExist(err), "the checkpoint's work directory is left: %v", err)
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}

// A dump CRIU refuses (an established TCP connection, which shimd does not ask it
// to dump) is FailedPrecondition with CRIU's reason; the container runs on and no
// archive is left.
func TestCheckpointDumpFails(t *testing.T) {
	env, rs := checkpointEnv(t)
	p := newPod(t, rs, "cp-tcp")
	id := p.run(p.container("tcp", "sh", "-c",
		`nc -l -p 9000 >/dev/null & sleep 0.5; echo connected; while true; do echo x; sleep 1; done | nc 127.0.0.1 9000`))
	waitLog(t, filepath.Join(p.logDir, "tcp.log"), "connected")
	time.Sleep(500 * time.Millisecond)
	dir := t.TempDir()
	_, err := rs.CheckpointContainer(ctxT(t, time.Minute), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "tcp.tar")})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	t.Logf("dump refused: %v", err)
	require.Contains(t, err.Error(), "TCP")
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	_, err = execSync(t, rs, id, 10, "true")
	require.NoError(t, err, "the container is not running on after the failed dump")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}
