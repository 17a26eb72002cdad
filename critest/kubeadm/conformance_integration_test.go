//go:build integration

package kubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/cluster"
	"github.com/shimd/shimd/critest/conformance"
	"github.com/shimd/shimd/critest/harness"
)

// The Kubernetes [Conformance] run over the kubeadm cluster (make conformance).
const (
	// conformanceEnv turns TestKubeadmConformance on: the whole suite takes hours.
	conformanceEnv = "SHIMD_KUBEADM_CONFORMANCE"
	// conformanceReserve is how much of go test's -timeout is kept for the
	// cleanups (kubeadm reset on every node, the leak check).
	conformanceReserve = 5 * time.Minute
	// DefaultConformanceParallel is the number of ginkgo processes of the
	// parallel pass when KUBEADM_CONFORMANCE_PARALLEL is unset: modest, the
	// three nodes share the host's cores with the e2e processes.
	DefaultConformanceParallel = 2
	// conformanceSkip is skipped in both passes, as upstream's conformance jobs
	// do: [Disruptive] tests break nodes, [Flaky] ones are not held to pass.
	conformanceSkip = `\[Disruptive\]|\[Flaky\]`
)

// TestKubeadmConformance runs the upstream e2e tests (e2e.test of the
// cluster's release) focused on [Conformance] over a kubeadm cluster of 3
// nodes on shimd: the control-plane node keeps kubeadm's taint, the two
// workers take the tests' pods. Two passes, as upstream's conformance jobs
// run them: the tests that are not [Serial] with KUBEADM_CONFORMANCE_PARALLEL
// ginkgo processes (default 2), then the [Serial] ones in one process; both
// skip [Disruptive] and [Flaky]. Offline: every image comes from the local
// registries through the nodes' hosts.toml (registry.k8s.io, docker.io, ...
// mirrored there and nowhere else); KUBE_TEST_REPO_LIST sends the "invalid
// registry" to a path the local registry lacks. Only with
// SHIMD_KUBEADM_CONFORMANCE=1 (make conformance). KUBEADM_CONFORMANCE_FOCUS
// narrows the focus (a regular expression ANDed with [Conformance]),
// KUBEADM_CONFORMANCE_SERIAL=0 leaves the serial pass out (=only: runs it
// alone), KUBEADM_CONFORMANCE_REPORT_DIR keeps the reports (default
// /var/tmp/shimd-kubeadm-conformance), SHIMD_KUBEADM_CRI=containerd runs the
// same cluster on containerd's CRI plugin instead of shimd (for comparing a
// failure).
func TestKubeadmConformance(t *testing.T) {
	if os.Getenv(conformanceEnv) != "1" {
		t.Skipf("the Conformance suite takes hours: run it with make conformance (%s=1)", conformanceEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("the kubeadm cluster needs root")
	}
	parallel := cluster.E2EParallel(t, "KUBEADM_CONFORMANCE_PARALLEL", DefaultConformanceParallel)
	e2eTest, ginkgo := cluster.E2EBinaries(t, "make conformance")
	reportDir := cluster.E2EReportDir(t, "KUBEADM_CONFORMANCE_REPORT_DIR", "/var/tmp/shimd-kubeadm-conformance")

	opts := Options{Nodes: 3, ControlPlaneTaint: true, ConformanceImages: true}
	cri := os.Getenv("SHIMD_KUBEADM_CRI")
	switch cri {
	case "", "shimd":
		cri = "shimd"
	case "containerd":
		opts.ContainerdCRI = map[string]bool{"node1": true, "node2": true, "node3": true}
	default:
		harness.Fatalf(t, "SHIMD_KUBEADM_CRI=%q: want shimd or containerd", cri)
	}
	removeE2EHostPaths(t)
	start := time.Now()
	c := StartWith(t, opts)
	t.Cleanup(func() { c.Reset(t) })
	// The agnhost image is built from hack/tools.sh e2e's binary: a set built
	// before that lacks it.
	agnhost, err := cluster.AgnhostImage()
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	c.registries[1].Digest(t, agnhost)
	nodes, _ := c.Kubectl(t, "get", "nodes", "-o", "wide")
	t.Logf("cluster of 3 nodes on %s Ready after %s:\n%s", cri, time.Since(start).Round(time.Second), nodes)

	work := harness.NewBaseDir(t)
	repoList := filepath.Join(work, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(conformanceRepoList), 0o644); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	focus := `\[Conformance\]`
	if f := os.Getenv("KUBEADM_CONFORMANCE_FOCUS"); f != "" {
		// The tag stands before or after the words, depending on the test.
		focus = `\[Conformance\].*(?:` + f + `)|(?:` + f + `).*\[Conformance\]`
	}
	var passes []conformancePass
	if os.Getenv("KUBEADM_CONFORMANCE_SERIAL") != "only" {
		passes = append(passes, conformancePass{name: "parallel", procs: parallel, focus: focus, skip: `\[Serial\]|` + conformanceSkip})
	}
	if os.Getenv("KUBEADM_CONFORMANCE_SERIAL") != "0" {
		passes = append(passes, conformancePass{name: "serial", procs: 1, focus: `\[Serial\]`, skip: conformanceSkip, and: focus})
	}
	for _, p := range passes {
		p.run(t, c, e2eTest, ginkgo, repoList, work, reportDir)
	}
	// The tests delete their namespaces: wait until no test pod is left, so
	// that kubeadm reset and the leak check see nodes at rest.
	c.WaitFor(t, 10*time.Minute, "the tests' namespaces gone", func() error {
		out, err := c.Kubectl(t, "get", "namespaces", "-o", "name")
		if err != nil {
			return err
		}
		var left []string
		for _, ns := range strings.Fields(out) {
			switch strings.TrimPrefix(ns, "namespace/") {
			case "default", "kube-system", "kube-public", "kube-node-lease", "kube-flannel":
			default:
				left = append(left, ns)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %s", strings.Join(left, " "))
		}
		return nil
	})
}

// conformanceRepoList is e2e.test's KUBE_TEST_REPO_LIST: the registries
// keep their upstream names (the nodes' hosts.toml send them to the local
// registries only), except the invalid one, whose own host has no hosts.toml:
// it becomes a path the local registry does not have, so that a pull fails
// with "not found" without leaving the machine.
const conformanceRepoList = `# KUBE_TEST_REPO_LIST for e2e.test over the kubeadm cluster (critest/kubeadm).
invalidRegistry: registry.k8s.io/shimd-invalid-registry
`

// conformancePass is one ginkgo run of e2e.test.
type conformancePass struct {
	name        string
	procs       int
	focus, skip string
	// and is a second focus the tests must also match (ginkgo ANDs a
	// --focus with the spec's text only through one regex: both orders).
	and string
}

func (p conformancePass) run(t *testing.T, c *Cluster, e2eTest, ginkgo, repoList, work, reportDir string) {
	t.Helper()
	focus := p.focus
	if p.and != "" {
		focus = `(?:` + p.focus + `).*(?:` + p.and + `)|(?:` + p.and + `).*(?:` + p.focus + `)`
	}
	dir := filepath.Join(reportDir, p.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	timeout := 6 * time.Hour
	if dl, ok := t.Deadline(); ok {
		timeout = time.Until(dl) - conformanceReserve - time.Minute
	}
	args := []string{
		"--procs=" + strconv.Itoa(p.procs), "--no-color", "-v", "--timeout=" + timeout.Round(time.Second).String(),
		"--focus=" + focus, "--skip=" + p.skip,
		e2eTest, "--",
		"--kubeconfig=" + c.Kubeconfig, "--provider=local", "--report-dir=" + dir,
		"--disable-log-dump", "--dump-logs-on-failure=false",
	}
	if p.procs == 1 {
		args = args[1:]
	}
	logPath := filepath.Join(dir, "e2e.log")
	t.Logf("e2e %s pass: KUBE_TEST_REPO_LIST=%s %s %s (log %s)", p.name, repoList, ginkgo, strings.Join(args, " "), logPath)
	start := time.Now()
	sum, ok, runErr := conformance.Run(t, conformance.Cmd{Bin: ginkgo, Args: args, PathDir: filepath.Dir(Bin("kubectl")),
		Tmp: work, LogPath: logPath, Reserve: conformanceReserve,
		Env: []string{"KUBE_TEST_REPO_LIST=" + repoList, "KUBECONFIG=" + c.Kubeconfig, "HOME=" + work}})
	wall := time.Since(start).Round(time.Second)
	if !ok {
		harness.Errorf(t, "e2e %s pass: no ginkgo summary after %s (%v); log %s", p.name, wall, runErr, logPath)
		return
	}
	t.Logf("e2e %s pass in %s: %s", p.name, wall, sum.Line)
	if runErr != nil || sum.Failed > 0 || !sum.Succeeded {
		harness.Errorf(t, "e2e %s pass failed (%v): %s\n%s", p.name, runErr, sum.Line, strings.Join(sum.Failures, "\n"))
	}
	// The junit report's counts include every skipped spec and ginkgo's suite
	// nodes: only its failures are logged.
	if j, err := conformance.ReadJUnit(filepath.Join(dir, "junit_01.xml")); err != nil {
		harness.Errorf(t, "junit report: %v", err)
	} else {
		for _, f := range j.Failed {
			t.Logf("failed: %s (report %s)", f, dir)
		}
	}
}

// e2eHostPaths are what upstream's e2e tests leave on a node's filesystem, which is
// the host's for these nodes: the Job tests' hostPath volumes (DirectoryOrCreate
// under /tmp/job-e2e, test/e2e/framework/job/fixtures.go), which nothing removes.
var e2eHostPaths = []string{"/tmp/job-e2e"}

// removeE2EHostPaths removes, when the test ends, what of e2eHostPaths the run made
// (one that was there before is the host's and stays).
func removeE2EHostPaths(t *testing.T) {
	for _, p := range e2eHostPaths {
		if _, err := os.Lstat(p); err == nil {
			t.Logf("%s was there before the run: left as it is", p)
			continue
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(p); err != nil {
				t.Errorf("remove the e2e tests' %s: %v", p, err)
			}
		})
	}
}
