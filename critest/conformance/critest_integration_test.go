//go:build integration

package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// nriRequestTimeout is shimd's nri.plugin_request_timeout under critest: above the
// 2 s its plugin synchronization specs keep a plugin's Synchronize call waiting.
const nriRequestTimeout = 10 * time.Second

// cleanupReserve is how much of go test's -timeout is kept for the harness
// cleanups (leak check, daemons, CNI) after critest is stopped.
const cleanupReserve = 3 * time.Minute

// TestCritest runs critest v1.37.0, its NRI contract specs included (on
// shimd's private NRI socket), against shimd, offline, CRITEST_RUNS times
// (default 1) in one environment: containerd + CNI + shimd from
// critest/harness, shimd pulling through hosts.toml files that send every
// mirrored registry (registry.k8s.io, gcr.io, ...) to the local registry and
// nowhere else. It fails if any run fails or lacks a summary, if a pod or
// container is left after a run, if an image came from outside the local
// registry, or if the harness finds a leak at the end.
func TestCritest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("critest needs root")
	}
	settings, err := SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	skips := repoSkips(t)
	for _, s := range skips {
		t.Logf("skip %q: %s", s.Pattern, s.Reason)
	}
	tools := harness.Tools()
	critestBin := tools.Critest
	// critest's -parallel runs "ginkgo" from PATH; hack/tools.sh puts it
	// next to critest.
	toolsBin := tools.CritoolsDir
	tools.Require(t, critestBin)
	if settings.Parallel > 1 {
		tools.Require(t, filepath.Join(toolsBin, "ginkgo"))
	}

	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	work := harness.NewBaseDir(t)
	hosts := filepath.Join(work, "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	env := harness.New(t, harness.Options{
		Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts),
			// The NRI synchronization specs hold a plugin's Synchronize open for
			// 2 s, the default request timeout, after which the plugin would be
			// dropped (on any runtime at its default) instead of synchronized.
			NRIRequestTimeout: nriRequestTimeout},
		LeakTimeout: time.Minute,
	})
	t.Logf("base %s, shimd log %s, containerd log %s, registry %s (log %s)",
		env.Base, env.Shimd.LogPath(), env.Containerd.LogPath(), reg.URL(), reg.LogPath())

	// The harness writes a crictl.yaml for shimd next to its config.
	crictlCfg := filepath.Join(filepath.Dir(env.Shimd.ConfigPath()), "crictl.yaml")
	// critest's NRI contract specs connect their plugin to shimd's private socket.
	settings.NRISocket = env.Shimd.NRISocket()
	args := Args(env.Shimd.Endpoint(), crictlCfg, settings, SkipRegex(skips))
	var lines []string
	for run := 1; run <= settings.Runs; run++ {
		logPath := filepath.Join(work, fmt.Sprintf("critest-%d.log", run))
		t.Logf("critest run %d of %d: %s %s (log %s)", run, settings.Runs, critestBin, strings.Join(args, " "), logPath)
		sum, ok, err := Run(t, Cmd{Bin: critestBin, Args: args, PathDir: toolsBin, Tmp: work, LogPath: logPath, Reserve: cleanupReserve})
		switch {
		case !ok:
			t.Errorf("run %d: no ginkgo summary in critest's output (%v)", run, err)
			lines = append(lines, fmt.Sprintf("run %d: no summary (%v)", run, err))
		default:
			t.Logf("run %d: %s", run, sum)
			lines = append(lines, fmt.Sprintf("run %d: %s", run, sum.Line))
			if err != nil || sum.Failed > 0 || !sum.Succeeded {
				t.Errorf("run %d failed (%v): %s\n%s\nfailure messages:\n%s", run, err, sum.Line,
					strings.Join(sum.Failures, "\n"), strings.Join(sum.Messages, "\n"))
			}
			for reason, n := range sum.RuntimeSkips {
				if !AllowedRuntimeSkip(reason) {
					t.Errorf("run %d: %d specs skipped themselves: %q: containerd's own CRI plugin passes them on this machine", run, n, reason)
				}
			}
		}
		checkNoPodsOrContainers(t, env, run)
		if t.Failed() && errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	checkImagesFromMirrors(t, env)
	checkRequestsLocal(t, env, reg)
	t.Logf("critest summary:\n  %s", strings.Join(lines, "\n  "))
}

// repoSkips reads the repository's skip list (critest/skip).
func repoSkips(t *testing.T) []Skip {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	skips, err := ReadSkipFile(filepath.Join(root, "critest", "skip"))
	if err != nil {
		t.Fatal(err)
	}
	return skips
}

// checkNoPodsOrContainers asserts that shimd lists no pod sandbox and no
// container after a critest run: critest removes everything it creates.
func checkNoPodsOrContainers(t *testing.T, env *harness.Env, run int) {
	t.Helper()
	rt := env.Shimd.Runtime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("run %d: ListPodSandbox: %v", run, err)
	} else {
		for _, p := range pods.Items {
			t.Errorf("run %d: pod sandbox left: %s %s/%s %s", run, p.Id, p.Metadata.GetNamespace(), p.Metadata.GetName(), p.State)
		}
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Errorf("run %d: ListContainers: %v", run, err)
	} else {
		for _, c := range ctrs.Containers {
			t.Errorf("run %d: container left: %s %s in pod %s %s", run, c.Id, c.Metadata.GetName(), c.PodSandboxId, c.State)
		}
	}
}

// checkImagesFromMirrors asserts that every image shimd holds is named on a
// registry the hermetic hosts.toml files send to the local registry, so
// nothing was fetched from elsewhere.
func checkImagesFromMirrors(t *testing.T, env *harness.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := env.Shimd.Images(t).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Errorf("ListImages: %v", err)
		return
	}
	// localhost/shimd/pause is shimd's built-in sandbox image, imported
	// from the binary, never pulled.
	mirrored := map[string]bool{"localhost": true}
	for _, h := range harness.MirroredHosts {
		mirrored[h] = true
	}
	n, bad := 0, 0
	for _, img := range resp.Images {
		for _, name := range append(append([]string{}, img.RepoTags...), img.RepoDigests...) {
			ref, err := reference.ParseNormalizedNamed(name)
			if err != nil {
				t.Errorf("image %s: name %q: %v", img.Id, name, err)
				continue
			}
			n++
			if !mirrored[reference.Domain(ref)] {
				bad++
				t.Errorf("image %s is named %q: %s is not served by the local registry", img.Id, name, reference.Domain(ref))
			}
		}
	}
	t.Logf("%d images (%d names, %d not from a mirrored registry) left in shimd", len(resp.Images), n, bad)
}

// registryURLRE finds the registry URLs in shimd's debug log: containerd's
// resolver logs every request it makes ("do request" ... url="http://...").
var registryURLRE = regexp.MustCompile(`msg="do request".*url="(https?://[^/"]+)`)

// checkRequestsLocal asserts that every registry request in shimd's log
// went to the local registry.
func checkRequestsLocal(t *testing.T, env *harness.Env, reg *harness.Registry) {
	t.Helper()
	b, err := os.ReadFile(env.Shimd.LogPath())
	if err != nil {
		t.Errorf("read shimd log: %v", err)
		return
	}
	hosts := map[string]int{}
	for _, m := range registryURLRE.FindAllSubmatch(b, -1) {
		hosts[string(m[1])]++
	}
	for h, n := range hosts {
		if h != reg.URL() {
			t.Errorf("shimd made %d registry requests to %s (local registry: %s)", n, h, reg.URL())
		}
	}
	t.Logf("registry requests in shimd's log: %v (local registry %s)", hosts, reg.URL())
}
