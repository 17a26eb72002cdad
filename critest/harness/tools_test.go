package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// hack/tools.sh builds DefaultCritoolsVersion when CRITOOLS_VERSION is unset, into
// the directory Tools looks in.
func TestCritoolsVersionIsToolsDefault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CRITOOLS_VERSION=\$\{CRITOOLS_VERSION:-(v[0-9.]+)\}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/tools.sh: no CRITOOLS_VERSION=${CRITOOLS_VERSION:-...} line")
	}
	if string(m[1]) != DefaultCritoolsVersion {
		t.Errorf("hack/tools.sh builds cri-tools %s by default, the tests run %s", m[1], DefaultCritoolsVersion)
	}
	if !regexp.MustCompile(`(?m)^CRIBIN=\$BIN/cri-tools-\$CRITOOLS_VERSION$`).Match(b) {
		t.Error("hack/tools.sh: crictl and critest no longer go to $BIN/cri-tools-$CRITOOLS_VERSION")
	}
	t.Setenv("SHIMD_TOOLS", "/tools")
	t.Setenv("CRITOOLS_VERSION", "")
	ts := Tools()
	if want := "/tools/bin/cri-tools-" + DefaultCritoolsVersion; ts.CritoolsDir != want || ts.Critest != want+"/critest" || ts.Crictl != want+"/crictl" {
		t.Errorf("Tools: cri-tools in %s (critest %s, crictl %s), want %s", ts.CritoolsDir, ts.Critest, ts.Crictl, want)
	}
	t.Setenv("CRITOOLS_VERSION", "v1.36.0")
	if ts := Tools(); ts.Critest != "/tools/bin/cri-tools-v1.36.0/critest" {
		t.Errorf("CRITOOLS_VERSION=v1.36.0: critest %s", ts.Critest)
	}
}
