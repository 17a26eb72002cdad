//go:build integration

package kubeadm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shimd/shimd/critest/harness"
)

// The cluster's offline registries: the image sets the nodes pull from, built once
// and cached.

// startRegistries serves the test image set and the kubeadm image set (and,
// with conformance, the conformance set) on the bridge's host address and
// writes hosts.toml files that send every upstream registry to them, tried in
// turn, and nowhere else.
func (c *Cluster) startRegistries(t testing.TB, conformance bool) {
	t.Helper()
	ip := c.net.gateway.String()
	regs := []*harness.Registry{
		harness.StartRegistry(t, harness.RegistryOptions{IP: ip, Storage: buildSet(t, "-kubeadm", "SHIMD_KUBEADM_REGISTRY_STORAGE", "/var/cache/shimd/registry-kubeadm")}),
		harness.StartRegistry(t, harness.RegistryOptions{IP: ip}),
	}
	if conformance {
		regs = append(regs, harness.StartRegistry(t, harness.RegistryOptions{IP: ip,
			Storage: buildSet(t, "-conformance", "SHIMD_CONFORMANCE_REGISTRY_STORAGE", "/var/cache/shimd/registry-conformance")}))
	}
	c.registries = regs
	c.hostsDir = filepath.Join(c.dir, "hosts")
	for _, h := range append(harness.MirroredHosts, "ghcr.io") {
		var b strings.Builder
		fmt.Fprintf(&b, "# critest/kubeadm: every pull goes to the local registries only.\nserver = %q\n", regs[0].URL())
		for _, r := range regs {
			fmt.Fprintf(&b, "\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", r.URL())
		}
		if err := os.MkdirAll(filepath.Join(c.hostsDir, h), 0o755); err != nil {
			harness.Fatalf(t, "kubeadm: %v", err)
		}
		if err := os.WriteFile(filepath.Join(c.hostsDir, h, "hosts.toml"), []byte(b.String()), 0o644); err != nil {
			harness.Fatalf(t, "kubeadm: %v", err)
		}
	}
}

// buildSet builds an image set (mkimages flag: -kubeadm or -conformance;
// nothing when its stamp is current) and returns its storage: env's value, or
// def.
func buildSet(t testing.TB, flag, env, def string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	cmd := exec.Command("go", "run", "./critest/images/cmd/mkimages", flag)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		harness.Fatalf(t, "kubeadm: building the image set (mkimages %s): %v\n%s", flag, err, out)
	}
	if s := os.Getenv(env); s != "" {
		return s
	}
	return def
}
