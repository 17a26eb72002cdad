// Package k8sversion names the Kubernetes release that the kubelet, cluster and
// node conformance tests run (critest/kubelet, critest/cluster) and the offline
// image set's agnhost comes from (critest/images), and where hack/tools.sh puts
// that release's binaries. A leaf: it imports nothing of shimd.
package k8sversion

import (
	"os"
	"path/filepath"
)

// Default is the release when KUBELET_VERSION is unset: hack/tools.sh's default,
// which TestDefaultIsToolsDefault keeps equal.
const Default = "v1.37.2"

// Env names the release under test, for hack/tools.sh and the tests alike:
// KUBELET_VERSION=v1.34.12 builds and runs that kubelet (the skew smoke, make
// e2e-kubelet-skew).
const Env = "KUBELET_VERSION"

// Get is the release under test: $KUBELET_VERSION, or Default.
func Get() string {
	if v := os.Getenv(Env); v != "" {
		return v
	}
	return Default
}

// BinDir is where hack/tools.sh puts the binaries of release Get() under the tools
// directory (SHIMD_TOOLS, default /var/cache/shimd/tools): bin/k8s-<release>,
// holding the kubelet, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubectl, etcd, e2e.test, agnhost and ginkgo-e2e. Each release has a directory of
// its own, so that a binary of one release is never taken for another's, and two
// releases stay cached side by side.
func BinDir(toolsDir string) string {
	return filepath.Join(toolsDir, "bin", "k8s-"+Get())
}
