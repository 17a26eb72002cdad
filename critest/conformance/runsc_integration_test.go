//go:build integration

package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestCritestRunsc runs critest (harness.CritoolsVersion) with -runtime-handler=runsc (gVisor,
// containerd-shim-runsc-v1, platform systrap) twice, in the same offline setup: once
// against shimd, once against containerd 2.4's own CRI plugin with the same runsc and
// the same options file. gVisor cannot do everything runc does (see README, "gVisor"),
// so failures are expected; the test fails when shimd fails a spec that containerd
// passes, or skips one that containerd runs. Runs only with CRITEST_RUNSC=1 (make
// critest-runsc) and runsc in the tools directory (bash hack/tools.sh runsc).
// CRITEST_PARALLEL and CRITEST_FOCUS apply.
func TestCritestRunsc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("critest needs root")
	}
	if os.Getenv("CRITEST_RUNSC") != "1" {
		t.Skip("two full critest runs (about 12 minutes): set CRITEST_RUNSC=1 (make critest-runsc)")
	}
	harness.SkipWithoutRunsc(t)
	settings, err := SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	settings.Runs, settings.Handler = 1, harness.RunscHandler
	skips := repoSkips(t)
	tools := harness.Tools()
	tools.Require(t, tools.Critest)
	toolsBin := filepath.Dir(tools.Critest)
	reg := harness.StartRegistry(t, harness.RegistryOptions{})

	var shimd, containerd Summary
	t.Run("shimd", func(t *testing.T) {
		work := harness.NewBaseDir(t)
		hosts := filepath.Join(work, "hosts")
		reg.WriteHermeticHostsDir(t, hosts)
		env := harness.New(t, harness.Options{
			Shimd:       harness.ShimdOptions{Runsc: true, ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts)},
			LeakTimeout: time.Minute,
		})
		crictlCfg := filepath.Join(filepath.Dir(env.Shimd.ConfigPath()), "crictl.yaml")
		shimd = runRunscSuite(t, Cmd{Bin: tools.Critest, PathDir: toolsBin, Tmp: work, Reserve: cleanupReserve,
			Args: Args(env.Shimd.Endpoint(), crictlCfg, settings, SkipRegex(skips)), LogPath: filepath.Join(work, "critest-shimd.log")})
		removeLeftPods(t, env.Shimd.Endpoint())
	})
	t.Run("containerd", func(t *testing.T) {
		work := harness.NewBaseDir(t)
		hosts := filepath.Join(work, "hosts")
		reg.WriteHermeticHostsDir(t, hosts)
		// What containerd leaves is containerd's business: logged, not checked.
		env := harness.New(t, harness.Options{
			NoShimd:       true,
			Containerd:    harness.ContainerdOptions{WithCRI: true, Runsc: true, RegistryConfigPath: hosts},
			SkipLeakCheck: true,
		})
		endpoint := "unix://" + env.Containerd.Address()
		crictlCfg := filepath.Join(work, "crictl.yaml")
		if err := os.WriteFile(crictlCfg, []byte(fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", endpoint, endpoint)), 0o644); err != nil {
			t.Fatal(err)
		}
		containerd = runRunscSuite(t, Cmd{Bin: tools.Critest, PathDir: toolsBin, Tmp: work, Reserve: cleanupReserve,
			Args: Args(endpoint, crictlCfg, settings, SkipRegex(skips)), LogPath: filepath.Join(work, "critest-containerd.log")})
		removeLeftPods(t, endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if leaks := harness.FindLeaks(ctx, env.LeakCheck()); len(leaks) > 0 {
			t.Logf("containerd's CRI plugin left %d things after its pods were removed (not checked), e.g. %s", len(leaks), leaks[0])
		}
	})
	if shimd.Line == "" || containerd.Line == "" {
		t.Fatal("a run has no summary: nothing to compare")
	}
	t.Logf("critest -runtime-handler=runsc summary:\n  shimd:      %s\n  containerd: %s", shimd.Line, containerd.Line)
	cf := containerd.FailedSpecs()
	for _, f := range shimd.FailedSpecs() {
		if slices.Contains(cf, f) {
			t.Logf("fails on both (gVisor): %s", f)
		} else {
			t.Errorf("shimd fails, containerd with the same runsc passes: %s", f)
		}
	}
	for _, f := range cf {
		if !slices.Contains(shimd.FailedSpecs(), f) {
			t.Logf("containerd fails, shimd passes: %s", f)
		}
	}
	for reason, n := range shimd.RuntimeSkips {
		if containerd.RuntimeSkips[reason] < n {
			t.Errorf("shimd skipped %d specs (containerd %d): %q", n, containerd.RuntimeSkips[reason], reason)
		}
	}
}

// removeLeftPods stops and removes the pods a failed spec left behind (critest does
// not clean up after some failures, e.g. "HostNetwork is true"), naming them, so that
// the leak check then tests the runtime's removal.
func removeLeftPods(t *testing.T, endpoint string) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("ListPodSandbox: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("removing a pod critest left: %s %s", p.Id, p.Metadata.GetName())
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("stop pod %s: %v", p.Id, err)
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("remove pod %s: %v", p.Id, err)
		}
	}
}

// runRunscSuite runs critest once and returns its summary, logging the failures; a
// missing summary fails the test.
func runRunscSuite(t *testing.T, c Cmd) Summary {
	t.Helper()
	t.Logf("critest: %s %s (log %s)", c.Bin, strings.Join(c.Args, " "), c.LogPath)
	sum, ok, err := Run(t, c)
	if !ok {
		t.Errorf("no ginkgo summary in critest's output (%v)", err)
		return Summary{}
	}
	t.Logf("%s\nfailed specs:\n  %s", sum, strings.Join(sum.Failures, "\n  "))
	return sum
}
