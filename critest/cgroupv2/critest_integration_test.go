//go:build integration

package cgroupv2

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/conformance"
	"github.com/shimd/shimd/critest/harness"
)

// critest (harness.CritoolsVersion, from the host's tools) in the guest against shimd (the systemd unit and cgroup driver),
// with the repository's skip list: all of it must pass, as on the host. Only with
// SHIMD_VM_CRITEST=1 (make e2e-cgroupv2): under emulation it takes most of an hour.
func TestCritestInGuest(t *testing.T) {
	requireGuest(t)
	if os.Getenv("SHIMD_VM_CRITEST") != "1" {
		t.Skip("SHIMD_VM_CRITEST=1 runs critest in the guest (make e2e-cgroupv2)")
	}
	root, err := os.Getwd()
	require.NoError(t, err)
	skips, err := conformance.ReadSkipFile(filepath.Join(root, "..", "skip"))
	require.NoError(t, err)
	// Two ginkgo processes for the guest's two CPUs; ginkgo is beside critest.
	// SHIMD_VM_CRITEST_FOCUS: a ginkgo focus, as CRITEST_FOCUS on the host.
	s := conformance.Settings{Parallel: 2, Runs: 1, Focus: os.Getenv("SHIMD_VM_CRITEST_FOCUS")}
	args := conformance.Args("unix:///run/shimd/shimd.sock", "/etc/crictl.yaml", s, conformance.SkipRegex(skips))
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	logPath := filepath.Join(share, "critest.log")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Minute)
	defer cancel()
	t0 := time.Now()
	code, err := guest.Run(ctx, "mkdir -p /tmp/critest && cd /tmp/critest && PATH=/mnt/tools/bin/cri-tools-"+harness.CritoolsVersion()+":$PATH critest "+
		strings.Join(quoted, " ")+" >/mnt/host/critest.log 2>&1", os.Stderr)
	require.NoError(t, err)
	out, err := os.ReadFile(logPath)
	require.NoError(t, err)
	sum, ok := conformance.ParseSummary(string(out))
	require.True(t, ok, "no ginkgo summary in critest's output (exit %d):\n%s", code, tail(string(out), 60))
	t.Logf("critest in the guest (%s driver), %.0f s: %s", vmDriver, time.Since(t0).Seconds(), sum.Line)
	require.Zero(t, sum.Failed, "critest failures:\n%s", strings.Join(sum.Failures, "\n"))
	require.True(t, sum.Succeeded, sum.Line)
	require.Equal(t, "0", sh(t, "crictl pods -q | wc -l"), "critest removes every pod it made")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
