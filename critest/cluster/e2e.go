//go:build integration

package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/shimd/shimd/critest/harness"
)

// What the runs of Kubernetes' e2e.test share (make node-conformance over the
// one-node cluster, make conformance over the kubeadm cluster).

// E2EBinaries are e2e.test and the ginkgo CLI of its release; the test fails
// when they or agnhost are missing (hack/tools.sh e2e builds them; target is
// the make target that does).
func E2EBinaries(t testing.TB, target string) (e2eTest, ginkgo string) {
	t.Helper()
	e2eTest, ginkgo = Binary("e2e.test"), Binary("ginkgo-e2e")
	for _, b := range []string{e2eTest, ginkgo, Binary("agnhost")} {
		if _, err := os.Stat(b); err != nil {
			harness.Fatalf(t, "no %s: build it with hack/tools.sh e2e (%s does)", b, target)
		}
	}
	return e2eTest, ginkgo
}

// E2EParallel is the number of ginkgo processes env asks for, def when unset.
func E2EParallel(t testing.TB, env string, def int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		harness.Fatalf(t, "%s=%q: want a positive integer", env, v)
	}
	return n
}

// E2EReportDir is the report directory env names (def when unset), made
// empty.
func E2EReportDir(t testing.TB, env, def string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		dir = def
	}
	if err := os.RemoveAll(dir); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	return dir
}

// AgnhostImage is the agnhost image the e2e tests of the release pull: tagged
// with the agnhost.version hack/tools.sh e2e writes beside the binary, as
// critest/images tags it.
func AgnhostImage() (string, error) {
	b, err := os.ReadFile(Binary("agnhost.version"))
	if err != nil {
		return "", fmt.Errorf("agnhost's version (build it again with hack/tools.sh e2e): %w", err)
	}
	return "registry.k8s.io/e2e-test-images/agnhost:" + strings.TrimSpace(string(b)), nil
}
