package kubelet

import (
	"os"
	"path/filepath"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/k8sversion"
)

// Version is the kubelet release under test: $KUBELET_VERSION (as for
// hack/tools.sh), default k8sversion.Default.
func Version() string { return k8sversion.Get() }

// BinDir holds the binaries hack/tools.sh builds of release Version:
// $SHIMD_TOOLS/bin/k8s-<release> (default /var/cache/shimd/tools/bin/k8s-v1.37.2).
func BinDir() string {
	dir := os.Getenv("SHIMD_TOOLS")
	if dir == "" {
		dir = harness.DefaultToolsDir
	}
	return k8sversion.BinDir(dir)
}

// Binary is the kubelet hack/tools.sh builds: BinDir()/kubelet.
func Binary() string { return filepath.Join(BinDir(), "kubelet") }
