//go:build integration

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/conformance"
	"github.com/shimd/shimd/critest/harness"
)

// The node conformance run (make node-conformance).
const (
	// nodeConformanceEnv turns TestNodeConformance on: it takes tens of minutes.
	nodeConformanceEnv = "SHIMD_NODE_CONFORMANCE"
	// testHandler is the runtime handler the e2e tests' RuntimeClass names
	// (e2enode.PreconfiguredRuntimeClassHandler): node e2e jobs configure it.
	testHandler = "test-handler"
	// e2eReserve is how much of go test's -timeout is kept for the cleanups.
	e2eReserve = 5 * time.Minute
)

// DefaultNodeConformanceParallel is the number of ginkgo processes when
// NODE_CONFORMANCE_PARALLEL is unset. Most of the suite waits on pods, so
// more processes than the 2 cores of the build machine pay.
const DefaultNodeConformanceParallel = 4

// TestNodeConformance runs the upstream Kubernetes e2e tests (v1.37.2, or
// KUBELET_VERSION's release) focused on
// [NodeConformance] against a one-node cluster on shimd, offline: e2e.test's image
// registries are remapped (KUBE_TEST_REPO_LIST) to the local registry, which
// serves the offline image set with the e2e images (agnhost built from the
// Kubernetes module). The tests in critest/skip-node-conformance are skipped,
// each with its reason; every other test must pass. Only with
// SHIMD_NODE_CONFORMANCE=1 (make node-conformance); NODE_CONFORMANCE_PARALLEL
// sets the ginkgo processes, NODE_CONFORMANCE_FOCUS narrows the focus,
// NODE_CONFORMANCE_REPORT_DIR keeps the report (default
// /var/tmp/shimd-node-conformance).
func TestNodeConformance(t *testing.T) {
	if os.Getenv(nodeConformanceEnv) != "1" {
		t.Skipf("node conformance takes about 85 minutes: run it with make node-conformance (%s=1)", nodeConformanceEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("the node conformance run needs root")
	}
	parallel := E2EParallel(t, "NODE_CONFORMANCE_PARALLEL", DefaultNodeConformanceParallel)
	e2eTest, ginkgo := E2EBinaries(t, "make node-conformance")
	root, err := harness.RepoRoot()
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	skips, err := conformance.ReadSkipFile(filepath.Join(root, "critest", "skip-node-conformance"))
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	for _, s := range skips {
		t.Logf("skip %q: %s", s.Pattern, s.Reason)
	}

	// The agnhost image must be in the offline set: it is built from hack/tools.sh
	// e2e's agnhost binary, so a set built before that lacks it.
	agnhostImage, err := AgnhostImage()
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	reg.Digest(t, agnhostImage) // fails when the set lacks agnhost
	// The registries that need credentials (gcr.io/authenticated-image-pulling,
	// gcr.io/k8s-authenticated-test) are one that does: a pull without them fails
	// with 401, as upstream's does.
	authReg := harness.StartRegistry(t, harness.RegistryOptions{Htpasswd: map[string]string{"e2e": "not-given-to-the-tests"}})
	work := harness.NewBaseDir(t)
	hosts := filepath.Join(work, "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	repoList := filepath.Join(work, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(RepoList(reg.Host(), authReg.Host())), 0o644); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	env := harness.New(t, harness.Options{
		Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n\n[runtimes.%s]\ntype = \"io.containerd.runc.v2\"\nbinary_name = %q\nroot = %q\n",
			hosts, testHandler, harness.Tools().Runc, filepath.Join(work, "runc-"+testHandler))},
		LeakTimeout: 2 * time.Minute,
	})
	start := time.Now()
	c := Start(t, Options{RuntimeEndpoint: env.Shimd.Endpoint(), NodeIP: env.CNI.Gateway.String()})
	t.Logf("cluster up in %s: API server %s, kubeconfig %s, shimd log %s", time.Since(start).Round(time.Second), c.Server, c.Kubeconfig, env.Shimd.LogPath())
	s := &e2e{env: env, c: c}
	t.Cleanup(func() {
		if t.Failed() {
			c.Kubelet.Stop()
			s.forceRemovePods(t)
		}
	})

	reportDir := E2EReportDir(t, "NODE_CONFORMANCE_REPORT_DIR", "/var/tmp/shimd-node-conformance")
	focus := `\[NodeConformance\]`
	if f := os.Getenv("NODE_CONFORMANCE_FOCUS"); f != "" {
		// The tag stands before or after the words, depending on the test.
		focus = `\[NodeConformance\].*(?:` + f + `)|(?:` + f + `).*\[NodeConformance\]`
	}
	timeout := 90 * time.Minute
	if dl, ok := t.Deadline(); ok {
		timeout = time.Until(dl) - e2eReserve - time.Minute
	}
	args := []string{
		"--procs=" + strconv.Itoa(parallel), "--no-color", "-v", "--timeout=" + timeout.Round(time.Second).String(),
		"--focus=" + focus, "--skip=" + conformance.SkipRegex(skips),
		e2eTest, "--",
		"--kubeconfig=" + c.Kubeconfig, "--provider=local", "--report-dir=" + reportDir,
		"--disable-log-dump", "--dump-logs-on-failure=false",
	}
	if parallel == 1 {
		args = args[1:]
	}
	logPath := filepath.Join(reportDir, "e2e.log")
	t.Logf("e2e: KUBE_TEST_REPO_LIST=%s %s %s (log %s)", repoList, ginkgo, strings.Join(args, " "), logPath)
	runStart := time.Now()
	sum, ok, runErr := conformance.Run(t, conformance.Cmd{Bin: ginkgo, Args: args, PathDir: filepath.Dir(Binary("kubectl")), Tmp: work, LogPath: logPath, Reserve: e2eReserve,
		Env: []string{"KUBE_TEST_REPO_LIST=" + repoList, "KUBECONFIG=" + c.Kubeconfig, "HOME=" + c.Dir}})
	wall := time.Since(runStart).Round(time.Second)
	if !ok {
		harness.Errorf(t, "no ginkgo summary in e2e.test's output after %s (%v); log %s", wall, runErr, logPath)
	} else {
		t.Logf("e2e.test in %s: %s", wall, sum.Line)
		if runErr != nil || sum.Failed > 0 || !sum.Succeeded {
			harness.Errorf(t, "node conformance failed (%v): %s\n%s", runErr, sum.Line, strings.Join(sum.Failures, "\n"))
		}
		for reason, n := range sum.RuntimeSkips {
			t.Logf("%d tests skipped themselves: %s", n, reason)
		}
	}
	if j, err := conformance.ReadJUnit(filepath.Join(reportDir, "junit_01.xml")); err != nil {
		harness.Errorf(t, "junit report: %v", err)
	} else {
		t.Logf("%s (report %s)", j, reportDir)
		for _, f := range j.Failed {
			t.Logf("failed: %s", f)
		}
	}

	// The tests delete their namespaces; wait until the kubelet has taken every pod
	// down, so that the harness's leak check sees a node at rest.
	c.WaitFor(t, 5*time.Minute, "shimd has no pods", func() error {
		out, err := env.Shimd.Crictl(t, "pods", "-q")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			return fmt.Errorf("pods left: %s", strings.Join(strings.Fields(out), " "))
		}
		return nil
	})
}

// RepoList is e2e.test's KUBE_TEST_REPO_LIST: every registry of
// test/utils/image/manifest.go on the local registry at host, under the
// repository path the offline image set keeps from the upstream name
// (registry.k8s.io/e2e-test-images/agnhost is host/e2e-test-images/agnhost). The
// invalid registry is a path the local registry does not have (a pull fails with
// "not found", never leaving the machine), and the registries that need
// credentials are on authHost, which wants them.
func RepoList(host, authHost string) string {
	return fmt.Sprintf(`# KUBE_TEST_REPO_LIST for Kubernetes e2e.test (critest/cluster): everything from the local registry.
# gcAuthenticatedRegistry is v1.34's (gone in v1.35+, where yaml ignores it).
gcAuthenticatedRegistry: %[2]s/authenticated-image-pulling
promoterE2eRegistry: %[1]s/e2e-test-images
buildImageRegistry: %[1]s/build-image
invalidRegistry: %[1]s/invalid
gcEtcdRegistry: %[1]s
gcRegistry: %[1]s
sigStorageRegistry: %[1]s/sig-storage
privateRegistry: %[2]s/k8s-authenticated-test
dockerLibraryRegistry: %[1]s/library
cloudProviderGcpRegistry: %[1]s/cloud-provider-gcp
`, host, authHost)
}
