//go:build integration

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// gVisor (runsc) as a runtime handler: every pod here runs with RuntimeHandler
// "runsc" on containerd-shim-runsc-v1 and runsc --platform=systrap from the tools
// directory (bash hack/tools.sh runsc). Without them the tests are skipped.

// gvisorPod starts an environment with the runsc handler, pulls busybox and runs a
// pod on runsc.
func gvisorPod(t *testing.T, name string) (*harness.Env, runtimeapi.RuntimeServiceClient, *podFixture) {
	t.Helper()
	requireRoot(t)
	harness.SkipWithoutRunsc(t)
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Runsc: true}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	cfg := podConfig(name)
	cfg.LogDirectory = t.TempDir()
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: harness.RunscHandler})
	require.NoError(t, err)
	return env, rs, &podFixture{t: t, rs: rs, id: resp.PodSandboxId, cfg: cfg, logDir: cfg.LogDirectory}
}

func TestGVisorPodRunsOnGVisor(t *testing.T) {
	_, rs, pod := gvisorPod(t, "gvisor-kernel")
	require.Equal(t, harness.RunscHandler, podStatus(t, rs, pod.id).RuntimeHandler)
	a := pod.run(pod.container("a", "sleep", "100000"))
	b := pod.run(pod.container("b", "sleep", "100000"))
	resp, err := execSync(t, rs, a, 10, "dmesg")
	require.NoError(t, err)
	require.Equal(t, int32(0), resp.ExitCode, "stderr: %s", resp.Stderr)
	require.Contains(t, string(resp.Stdout), "gVisor")
	resp, err = execSync(t, rs, b, 10, "ps", "-o", "pid,args")
	require.NoError(t, err)
	t.Logf("ps in b:\n%s", resp.Stdout)
	require.True(t, strings.Contains(string(resp.Stdout), "sleep"))
	stopRemove(t, rs, pod.id)
}
