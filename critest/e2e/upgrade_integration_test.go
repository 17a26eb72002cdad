//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// upgradeFromEnv names the git revision whose shimd TestUpgradeInPlace replaces
// (make upgrade-test sets it; docs/operating.md, "Upgrading with pods running").
const upgradeFromEnv = "SHIMD_UPGRADE_FROM"

// Upgrade in place: a shimd built from an older revision runs pods (a running
// container writing its log, one that exited, one only created); it is stopped and
// the current build started on the same state. Every pod and container is there
// with its status, the running one goes on writing the same log, exec and attach
// work, the created one starts, and everything is removed with nothing left.
func TestUpgradeInPlace(t *testing.T) {
	from := os.Getenv(upgradeFromEnv)
	if from == "" {
		t.Skipf("%s is not set (make upgrade-test sets it)", upgradeFromEnv)
	}
	requireRoot(t)
	old := harness.BuildShimdAt(t, from)
	env, _ := imageEnv(t, harness.Options{})
	current := env.Shimd.Binary()
	env.Shimd.Stop()
	require.NoError(t, env.Shimd.UseBinary(old))
	env.Shimd.Start(t)
	rs := env.Shimd.Runtime(t)
	ver, err := rs.Version(ctxT(t, 10*time.Second), &runtimeapi.VersionRequest{})
	require.NoError(t, err)
	t.Logf("old shimd: %s %s", ver.RuntimeName, ver.RuntimeVersion)
	pull(t, env, busyboxImage)

	p := newPod(t, rs, "upgrade")
	running := p.run(p.container("running", "sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"))
	exited := p.run(p.container("exited", "sh", "-c", "echo bye; exit 3"))
	created := p.create(p.container("created", "sh", "-c", "echo started after the upgrade; sleep 3600"))
	waitExited(t, rs, exited)
	logPath := filepath.Join(p.logDir, "running.log")
	waitLog(t, logPath, "line 5\n")
	before := map[string]*runtimeapi.ContainerStatus{}
	for _, id := range []string{running, exited, created} {
		before[id] = containerStatus(t, rs, id)
	}
	podBefore, err := rs.PodSandboxStatus(ctxT(t, 10*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id})
	require.NoError(t, err)

	env.Shimd.Stop()
	require.NoError(t, env.Shimd.UseBinary(current))
	env.Shimd.Start(t)
	rs = env.Shimd.Runtime(t)
	ver, err = rs.Version(ctxT(t, 10*time.Second), &runtimeapi.VersionRequest{})
	require.NoError(t, err)
	t.Logf("current shimd: %s %s", ver.RuntimeName, ver.RuntimeVersion)

	podAfter, err := rs.PodSandboxStatus(ctxT(t, 10*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id})
	require.NoError(t, err)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podAfter.Status.State)
	require.Equal(t, podBefore.Status.Network.GetIp(), podAfter.Status.Network.GetIp())
	require.Equal(t, podBefore.Status.CreatedAt, podAfter.Status.CreatedAt)
	for id, b := range before {
		a := containerStatus(t, rs, id)
		require.Equal(t, b.State, a.State, "%s", b.Metadata.Name)
		require.Equal(t, b.CreatedAt, a.CreatedAt, "%s", b.Metadata.Name)
		require.Equal(t, b.StartedAt, a.StartedAt, "%s", b.Metadata.Name)
		require.Equal(t, b.FinishedAt, a.FinishedAt, "%s", b.Metadata.Name)
		require.Equal(t, b.ExitCode, a.ExitCode, "%s", b.Metadata.Name)
		require.Equal(t, b.LogPath, a.LogPath, "%s", b.Metadata.Name)
		require.Equal(t, b.Image.GetImage(), a.Image.GetImage(), "%s", b.Metadata.Name)
	}
	// The running container's log goes on, through the new shimd.
	n := strings.Count(readFile(t, logPath), "line ")
	require.Eventually(t, func() bool { return strings.Count(readFile(t, logPath), "line ") > n+5 }, 10*time.Second, 100*time.Millisecond,
		"the running container's log stopped at the upgrade")
	out, err := execSync(t, rs, running, 10, "echo", "exec after the upgrade")
	require.NoError(t, err)
	require.Equal(t, "exec after the upgrade\n", string(out.Stdout))
	attach, err := rs.Attach(ctxT(t, 10*time.Second), &runtimeapi.AttachRequest{ContainerId: running, Stdout: true})
	require.NoError(t, err)
	require.NotEmpty(t, attach.Url)
	p.start(created)
	waitLog(t, filepath.Join(p.logDir, "created.log"), "started after the upgrade")
	stopRemove(t, rs, p.id)
	env.CheckNoLeaks(t)
}
