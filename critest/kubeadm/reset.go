//go:build integration

package kubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tearing a cluster down as an operator does (kubeadm reset on each node), and what
// of shimd's a node must not keep after it.

// Reset stops each node's kubelet and runs kubeadm reset there (workers first),
// as an operator tears a cluster down; it fails the test if one fails.
func (c *Cluster) Reset(t testing.TB) {
	t.Helper()
	if c.Guest != nil {
		c.Guest.reset(t)
	}
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		n := c.Nodes[i]
		if n.Kubelet != nil {
			n.Kubelet.Stop()
		}
		start := time.Now()
		if out, err := n.Run(t, Bin("kubeadm"), "reset", "-f", "--cri-socket", n.CRIEndpoint()); err != nil {
			t.Errorf("kubeadm reset: %v", err)
		} else {
			t.Logf("kubeadm reset on %s: %s\n%s", n.Name, time.Since(start).Round(time.Second), tail([]byte(out), 8))
		}
		if n.ContainerdCRI {
			continue
		}
		if left := n.shimdLeftovers(t); len(left) > 0 {
			t.Errorf("kubeadm reset on %s left of shimd's: %s", n.Name, strings.Join(left, "; "))
		}
	}
}

// dump logs the cluster's pods and the logs of those not running, for a failure.
func (c *Cluster) dump(t testing.TB) {
	t.Helper()
	out, _ := c.Kubectl(t, "get", "pods", "-A", "-o", "wide")
	t.Logf("kubectl get pods -A:\n%s", out)
	out, _ = c.Kubectl(t, "get", "nodes", "-o", "wide")
	t.Logf("kubectl get nodes:\n%s", out)
	lines, _ := c.Kubectl(t, "get", "pods", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,READY:.status.containerStatuses[*].ready")
	for _, l := range strings.Split(lines, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.Contains(f[2], "false") && f[2] != "<none>" {
			continue
		}
		for _, prev := range []string{"", "--previous"} {
			args := []string{"-n", f[0], "logs", f[1], "--all-containers", "--tail", "30"}
			if prev != "" {
				args = append(args, prev)
			}
			out, err := c.Kubectl(t, args...)
			t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		out, _ := c.Kubectl(t, "-n", f[0], "describe", "pod", f[1])
		t.Logf("describe %s:\n%s", f[1], tail([]byte(out), 15))
	}
}

// shimdLeftovers lists what of shimd's a node keeps after kubeadm reset, which
// removes every pod through the CRI: pods, network namespaces, IP leases,
// portmap's per-pod iptables chains, container cgroups.
func (n *Node) shimdLeftovers(t testing.TB) []string {
	var left []string
	if out, err := n.Shimd.Crictl(t, "pods", "-q"); err != nil || strings.TrimSpace(out) != "" {
		left = append(left, fmt.Sprintf("pods %q %v", out, err))
	}
	if es, _ := os.ReadDir(n.Shimd.NetnsDir()); len(es) > 0 {
		left = append(left, fmt.Sprintf("%d netns in %s", len(es), n.Shimd.NetnsDir()))
	}
	leases, _ := filepath.Glob(n.Path("/var/lib/cni/networks/cbr0/198.*"))
	if len(leases) > 0 {
		left = append(left, "IP leases "+strings.Join(leases, " "))
	}
	if out, err := n.Run(t, "iptables-save", "-t", "nat"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, ":CNI-DN-") || strings.HasPrefix(l, "-A CNI-HOSTPORT-DNAT") {
				left = append(left, "iptables "+l)
			}
		}
	}
	if hs, err := cgroupHierarchies(); err == nil {
		for _, h := range hs {
			filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() && len(d.Name()) == 64 {
					left = append(left, "cgroup "+p)
				}
				return nil
			})
		}
	}
	return left
}
