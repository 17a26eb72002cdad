//go:build integration

package kubeadm

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/vm"
)

// GuestNode is a node of the cluster in the cgroup v2 guest of critest/vm: a
// Debian 12 virtual machine (QEMU, software emulation) with systemd as PID 1,
// shimd installed by `make install` with its systemd unit and the systemd
// cgroup driver, containerd and the kubelet as systemd services. Its eth0 is
// a tap on the cluster's bridge, so it is one more host on the node network,
// reached and reaching by address like the namespace nodes (no user-mode
// networking). It is set up as an operator sets up a node: the kubelet's unit
// and kubeadm's drop-in as the Kubernetes packages install them, then
// kubeadm join, which starts the kubelet through systemd.
type GuestNode struct {
	Name string
	IP   net.IP
	VM   *vm.VM
	// Dir is the VM's directory on the host; Dir/share is the guest's /mnt/host.
	Dir string
}

// guestBoot is a guest booting in the background while the namespace nodes
// start: wait returns it booted and provisioned (containerd and shimd up).
type guestBoot struct {
	node *GuestNode
	wait func() (*vm.VM, error)
}

// bootGuest makes a tap on the cluster's bridge and boots the guest on it in
// the background (42 s to containerd and shimd up under emulation, 2026-11-29).
// The VM is killed and the tap deleted at the end of the test.
func bootGuest(t testing.TB, nw *network, name string, ip net.IP) *guestBoot {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "shimd-kadm-vm-")
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	tap := "shkt" + nw.id
	for _, args := range [][]string{
		{"ip", "tuntap", "add", "dev", tap, "mode", "tap"},
		{"ip", "link", "set", tap, "master", nw.bridge, "up"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			harness.Fatalf(t, "kubeadm: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[1] == "tuntap" {
			t.Cleanup(func() { exec.Command("ip", "link", "delete", tap).Run() })
		}
	}
	log, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	type result struct {
		v   *vm.VM
		err error
	}
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		v, err := vm.Up(ctx, vm.UpConfig{Dir: dir, CgroupDriver: "systemd", Log: log, Tap: tap})
		ch <- result{v, err}
	}()
	g := &guestBoot{node: &GuestNode{Name: name, IP: ip, Dir: dir}}
	g.wait = sync.OnceValues(func() (*vm.VM, error) {
		r := <-ch
		log.Close()
		if r.err == nil {
			t.Logf("kubeadm: guest %s booted and provisioned in %s (qemu pid %d)", name, time.Since(start).Round(time.Second), r.v.PID())
		}
		return r.v, r.err
	})
	t.Cleanup(func() {
		v, _ := g.wait()
		if v == nil {
			t.Logf("kubeadm: the guest's directory is kept: %s", dir)
			return
		}
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			out, _ := v.Output(ctx, "systemctl --no-pager --failed; journalctl -u kubelet -u shimd -u containerd --no-pager -o short-precise | tail -n 200")
			cancel()
			t.Logf("kubeadm: guest %s's journal (last 200 lines of kubelet, shimd, containerd):\n%s", name, out)
		}
		// Its disk is a snapshot: nothing to keep, nothing to power down cleanly.
		v.Kill()
		if t.Failed() {
			t.Logf("kubeadm: the guest's directory is kept: %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	return g
}

// ready waits for the guest's boot and makes it a node of the cluster as an
// operator would: its address on the node network, the cluster's registries,
// no CNI network of shimd's own (flannel's DaemonSet writes one), the
// kubelet's systemd unit and kubeadm's drop-in.
func (g *guestBoot) ready(t testing.TB, c *Cluster) *GuestNode {
	t.Helper()
	v, err := g.wait()
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(g.node.Dir, "up.log"))
		harness.Fatalf(t, "kubeadm: guest %s: %v\n%s", g.node.Name, err, tail(b, 40))
	}
	n := g.node
	n.VM = v
	share := filepath.Join(n.Dir, "share")
	if out, err := exec.Command("cp", "-r", c.hostsDir, filepath.Join(share, "hosts")).CombinedOutput(); err != nil {
		harness.Fatalf(t, "kubeadm: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(share, "guest-node.sh"), []byte(guestNodeScript), 0o755); err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	out, err := n.Sh(t, 10*time.Minute, fmt.Sprintf("bash /mnt/host/guest-node.sh %s %s %s %s",
		n.Name, n.IP, c.Nodes[0].IP, ServiceSubnet))
	if err != nil {
		harness.Fatalf(t, "kubeadm: guest %s: %v", n.Name, err)
	}
	t.Logf("kubeadm: guest %s set up:\n%s", n.Name, out)
	return n
}

// Sh runs a bash script in the guest and returns its output; a non-zero exit
// is an error carrying it.
func (n *GuestNode) Sh(t testing.TB, timeout time.Duration, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := n.VM.Output(ctx, script)
	return strings.TrimSpace(out), err
}

// file writes content into the guest's /mnt/host and returns its path there.
func (n *GuestNode) file(t testing.TB, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.Dir, "share", name), []byte(content), 0o644); err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	return "/mnt/host/" + name
}

// guestNodeScript runs in the guest (root) after provision.sh: the node's
// network, the cluster's registries for shimd, and the kubelet installed as
// the Kubernetes packages install it (their kubelet.service and kubeadm's
// 10-kubeadm.conf drop-in), enabled but not started: kubeadm join starts it.
// Arguments: name, address, the first node's address, the Service subnet.
const guestNodeScript = `set -euo pipefail
name=$1 ip=$2 api=$3 svc=$4
hostname "$name"
echo "$name" >/etc/hostname
printf '127.0.0.1 localhost\n%s %s\n' "$ip" "$name" >/etc/hosts
ip addr flush dev eth0
ip addr add "$ip/24" dev eth0
ip link set eth0 up
# As on the namespace nodes: no default route (nothing leaves the node
# network), the Service subnet on eth0 for the first packet of a connection.
ip route add "$svc" dev eth0
modprobe br_netfilter
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
# The API server on the first node, over the bridge.
for _ in $(seq 30); do timeout 2 bash -c "exec 3<>/dev/tcp/$api/6443" 2>/dev/null && break; sleep 1; done
timeout 5 bash -c "exec 3<>/dev/tcp/$api/6443"

# shimd pulls from the cluster's registries only; the pod network is flannel's.
rm -rf /etc/shimd/certs.d
cp -r /mnt/host/hosts /etc/shimd/certs.d
rm -f /etc/cni/net.d/*
systemctl restart shimd
for _ in $(seq 120); do crictl info >/dev/null 2>&1 && break; sleep 1; done

k8s=/mnt/tools/bin/k8s-v1.37.2
for b in kubelet kubeadm kubectl; do ln -sf "$k8s/$b" /usr/bin/$b; done
cat >/etc/systemd/system/kubelet.service <<'EOF'
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
EOF
mkdir -p /etc/systemd/system/kubelet.service.d
cat >/etc/systemd/system/kubelet.service.d/10-kubeadm.conf <<'EOF'
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
EOF
systemctl daemon-reload
systemctl enable kubelet 2>&1
echo "node $name at $ip: cgroup fs $(stat -fc %T /sys/fs/cgroup), PID 1 $(cat /proc/1/comm), kernel $(uname -r), $(nproc) CPUs, $(kubelet --version)"
`

// joinGuest runs kubeadm join in the guest. The cluster's KubeletConfiguration
// (kubeadm init's, with the cgroupfs driver of the namespace nodes' shimd) is
// patched for this node with kubeadm's patches directory: cgroupDriver systemd,
// as its shimd uses.
func (c *Cluster) joinGuest(t testing.TB, n *GuestNode) {
	t.Helper()
	n.file(t, "patches-kubeletconfiguration+merge.yaml", "cgroupDriver: systemd\n")
	cfg := c.joinConfig(t, "patches:\n  directory: /etc/kubernetes/patches\n"+
		nodeRegistration(n.Name, "unix:///run/shimd/shimd.sock", n.IP, "", "  taints: []\n", nil))
	path := n.file(t, "kubeadm-join.yaml", cfg)
	start := time.Now()
	out, err := n.Sh(t, 20*time.Minute, fmt.Sprintf(`set -eo pipefail
mkdir -p /etc/kubernetes/patches
cp /mnt/host/patches-kubeletconfiguration+merge.yaml /etc/kubernetes/patches/kubeletconfiguration+merge.yaml
kubeadm join --config %s --v 1 2>&1 | tail -n 40
systemctl is-active kubelet
grep -H cgroupDriver /var/lib/kubelet/config.yaml`, path))
	if err != nil {
		harness.Fatalf(t, "kubeadm join on %s: %v", n.Name, err)
	}
	t.Logf("kubeadm join on %s: %s\n%s", n.Name, time.Since(start).Round(time.Second), out)
}

// guestLeftovers lists what of shimd's the guest keeps: pods, pinned network
// namespaces, shims, container scopes, overlay mounts, IP leases of flannel's
// network, portmap's chains.
const guestLeftovers = `crictl pods -q | sed 's/^/pod /'
ls /run/shimd/netns 2>/dev/null | sed 's/^/netns /'
pgrep -a containerd-shim | sed 's/^/shim /'
find /sys/fs/cgroup -type d -name 'shimd-*.scope' | sed 's/^/cgroup /'
grep ' overlay ' /proc/mounts | grep -v ' / ' | sed 's/^/mount /'
ls /var/lib/cni/networks/cbr0 2>/dev/null | grep '^198\.' | sed 's/^/lease /'
iptables-save -t nat | grep -E '^:CNI-DN-|^-A CNI-HOSTPORT-DNAT' | sed 's/^/iptables /'
true`

// Leftovers lists what of shimd's the guest holds (guestLeftovers).
func (n *GuestNode) Leftovers(t testing.TB) []string {
	t.Helper()
	out, err := n.Sh(t, 2*time.Minute, guestLeftovers)
	if err != nil {
		return []string{err.Error()}
	}
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// reset runs kubeadm reset in the guest, as on the other nodes, and checks that
// nothing of shimd's is left.
func (n *GuestNode) reset(t testing.TB) {
	t.Helper()
	start := time.Now()
	out, err := n.Sh(t, 10*time.Minute, "kubeadm reset -f --cri-socket unix:///run/shimd/shimd.sock 2>&1 | tail -n 8")
	if err != nil {
		t.Errorf("kubeadm reset on %s: %v", n.Name, err)
		return
	}
	t.Logf("kubeadm reset on %s: %s\n%s", n.Name, time.Since(start).Round(time.Second), out)
	var left []string
	// systemd stops an emptied scope a moment after its last process.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		if left = n.Leftovers(t); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("kubeadm reset on %s left of shimd's: %s", n.Name, strings.Join(left, "; "))
	}
}
