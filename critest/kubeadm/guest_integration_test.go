//go:build integration

package kubeadm

import (
	"os"
	"strings"
	"testing"
	"time"
)

// guestEnv turns TestKubeadmGuestNode on (make e2e-kubeadm-guest): it boots the
// cgroup v2 guest under QEMU's emulation, which takes most of a 2-core machine
// for about 3 minutes.
const guestEnv = "SHIMD_KUBEADM_GUEST"

// TestKubeadmGuestNode: both host classes in one cluster (issue 47, item 2).
// Two namespace nodes on this host (cgroup v1, shimd with the cgroupfs
// driver) and a node in the cgroup v2 guest (systemd as PID 1, shimd with the
// systemd driver, installed by make install), the guest bridged onto the node
// network by a tap. The guest joins as an operator's node does: the kubelet's
// unit and kubeadm's drop-in installed, kubeadm join with a kubelet patch for
// its cgroup driver, the kubelet started by systemd. Then the smoke's checks
// between a namespace node and the guest (pod IPs both ways over flannel's
// VXLAN, a Service by ClusterIP and DNS name from both, hostPort and
// hostNetwork on the guest, exec, logs and port-forward into it), and kubeadm
// reset on every node, the guest included, leaves nothing of shimd's.
func TestKubeadmGuestNode(t *testing.T) {
	if os.Getenv(guestEnv) != "1" {
		t.Skipf("the guest node boots a VM under emulation (about 3 minutes): run it with make e2e-kubeadm-guest (%s=1)", guestEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("the kubeadm cluster needs root")
	}
	start := time.Now()
	c := StartWith(t, Options{Nodes: 2, Guest: true})
	t.Cleanup(func() { c.Reset(t) })
	g, n2 := c.Guest, c.Nodes[1]
	nodes, _ := c.Kubectl(t, "get", "nodes", "-o", "wide")
	t.Logf("cluster of 2 namespace nodes and guest %s Ready after %s:\n%s", g.Name, time.Since(start).Round(time.Second), nodes)

	// The guest is what it claims: cgroup v2, systemd, the kubelet a systemd
	// service with the systemd driver, on shimd.
	facts, err := g.Sh(t, 2*time.Minute, `echo "$(stat -fc %T /sys/fs/cgroup) $(cat /proc/1/comm) $(systemctl is-active kubelet shimd containerd | tr '\n' ' ')"
sed -n 's/^cgroupDriver: //p' /var/lib/kubelet/config.yaml
sed -n 's/^cgroup_driver = //p' /etc/shimd/config.toml`)
	if err != nil {
		t.Fatalf("guest facts: %v", err)
	}
	if want := "cgroup2fs systemd active active active \nsystemd\n\"systemd\""; facts != want {
		t.Errorf("guest %s: %q, want %q (cgroup fs, PID 1, kubelet shimd containerd active, the kubelet's and shimd's cgroup driver)", g.Name, facts, want)
	}
	rt, err := c.Kubectl(t, "get", "node", g.Name, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kernelVersion}")
	// "Unknown": the kubelet could not parse the version of make install's build.
	if err != nil || !strings.HasPrefix(rt, "shimd://") || strings.HasPrefix(rt, "shimd://Unknown") {
		t.Errorf("node %s's runtime and kernel %q (want shimd://VERSION ...): %v", g.Name, rt, err)
	}
	t.Logf("guest %s: %s, runtime and kernel %s", g.Name, strings.ReplaceAll(facts, "\n", ", "), rt)

	acrossNodes(t, c, n2.Name, g.Name, g.IP.String(), 10*time.Minute)

	// The guest's pods run in systemd scopes under the kubelet's slices.
	scopes, err := g.Sh(t, time.Minute, `find /sys/fs/cgroup/kubepods.slice -type d -name 'shimd-*.scope' | wc -l`)
	if err != nil || scopes == "0" {
		t.Errorf("no shimd scope under the guest's kubepods.slice: %q, %v", scopes, err)
	}
	// What kubeadm reset must clear in the guest (Reset checks it is gone) is
	// there to see now: the check can fail.
	left := strings.Join(g.Leftovers(t), "\n")
	for _, want := range []string{"pod ", "cgroup ", "lease ", "iptables :CNI-DN-"} {
		if !strings.Contains(left, want) {
			t.Errorf("before kubeadm reset, %s's shimd state shows no %q:\n%s", g.Name, want, left)
		}
	}
	t.Logf("guest %s before kubeadm reset: %s scopes under kubepods.slice, %d leftovers' lines", g.Name, scopes, len(strings.Split(left, "\n")))
}
