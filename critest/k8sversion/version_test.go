package k8sversion

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// hack/tools.sh builds Default when KUBELET_VERSION is unset, and puts it where
// BinDir looks.
func TestDefaultIsToolsDefault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBELET_VERSION=\$\{KUBELET_VERSION:-(v[0-9.]+)\}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/tools.sh: no KUBELET_VERSION=${KUBELET_VERSION:-...} line")
	}
	if string(m[1]) != Default {
		t.Errorf("hack/tools.sh builds %s by default, the tests run %s", m[1], Default)
	}
	if !regexp.MustCompile(`(?m)^KBIN=\$BIN/k8s-\$KUBELET_VERSION$`).Match(b) {
		t.Error("hack/tools.sh: no KBIN=$BIN/k8s-$KUBELET_VERSION line: BinDir looks elsewhere")
	}
}

func TestGetAndBinDir(t *testing.T) {
	t.Setenv(Env, "")
	if Get() != Default || BinDir("/tools") != "/tools/bin/k8s-"+Default {
		t.Errorf("unset: %s %s", Get(), BinDir("/tools"))
	}
	t.Setenv(Env, "v1.34.12")
	if Get() != "v1.34.12" || BinDir("/tools") != "/tools/bin/k8s-v1.34.12" {
		t.Errorf("v1.34.12: %s %s", Get(), BinDir("/tools"))
	}
}
