//go:build integration

package kubeadm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/cluster"
	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

// The cluster's address plan, all inside 198.18.0.0/15: pods in 198.18.0.0/16
// (a /24 per node, flannel), Services in ServiceSubnet, nodes in a /24 of
// 198.19.200.0-198.19.249.0 on the test bridge.
const (
	PodSubnet     = "198.18.0.0/16"
	ServiceSubnet = "198.19.160.0/20"
	// Token is the bootstrap token kubeadm init creates and kubeadm join uses.
	Token = "shimdk.0123456789abcdef"
)

// Bin is a binary of the Kubernetes release hack/tools.sh kubeadm builds.
func Bin(name string) string { return filepath.Join(filepath.Dir(kubelet.Binary()), name) }

// Cluster is a kubeadm cluster of Nodes; Nodes[0] is the control plane.
type Cluster struct {
	// Cluster gives kubectl (Kubectl, KubectlIn, KubectlCmd, Apply) as
	// cluster-admin with the first node's admin.conf, from the host.
	*cluster.Cluster
	Nodes []*Node
	// Guest is the node in the cgroup v2 guest (Options.Guest), or nil.
	Guest    *GuestNode
	net      *network
	hostsDir string
	dir      string
	// registries serve the kubeadm image set and the test image set, in the
	// order the nodes try them.
	registries []*harness.Registry
	// controlPlaneTaint keeps kubeadm's NoSchedule taint on the first node.
	controlPlaneTaint bool
}

// Start builds a cluster of n nodes: the registries, the network, kubeadm init
// on the first node and kubeadm join on the others, then flannel; it waits
// until every node is Ready.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, Options{Nodes: n})
}

// Options configures StartWith.
type Options struct {
	Nodes int
	// ContainerdCRI names the nodes whose kubelet uses containerd's own CRI
	// plugin (enabled on that node's containerd, beside shimd) instead of shimd:
	// the starting point of a move to shimd.
	ContainerdCRI map[string]bool
	// ControlPlaneTaint keeps the taint kubeadm init puts on the control-plane
	// node (node-role.kubernetes.io/control-plane:NoSchedule), as on an
	// operator's cluster: only the other nodes take ordinary pods. Without
	// it every node is schedulable.
	ControlPlaneTaint bool
	// ConformanceImages serves the conformance image set (mkimages
	// -conformance: what the [Conformance] tests pull beyond the test set)
	// too.
	ConformanceImages bool
	// Guest adds a node in the cgroup v2 + systemd guest of critest/vm
	// (GuestNode), bridged to the others, after the Nodes namespace nodes.
	Guest bool
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	n := opts.Nodes
	for _, b := range []string{"kubeadm", "kubelet", "kubectl", "flanneld", "kube-proxy", "coredns"} {
		if _, err := os.Stat(Bin(b)); err != nil {
			t.Skipf("no %s: build it with hack/tools.sh kubeadm", Bin(b))
		}
	}
	leaks := startLeakCheck(t)
	restore := saveSysctls(t)
	t.Cleanup(restore)
	c := &Cluster{dir: harness.NewBaseDir(t), controlPlaneTaint: opts.ControlPlaneTaint}
	c.Cluster = &cluster.Cluster{Dir: c.dir}
	c.net = newNetwork(t)
	leaks.id = c.net.id
	c.startRegistries(t, opts.ConformanceImages)
	var guest *guestBoot
	if opts.Guest {
		// It boots under emulation while the other nodes start.
		guest = bootGuest(t, c.net, fmt.Sprintf("node%d-vm", n+1), c.net.nodeIP(n+1))
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node%d", i)
		c.Nodes = append(c.Nodes, startNode(t, c.net, name, c.net.nodeIP(i), c.hostsDir, opts.ContainerdCRI[name]))
		leaks.dirs = append(leaks.dirs, c.Nodes[i-1].Dir)
	}
	c.initFirst(t)
	for _, node := range c.Nodes[1:] {
		c.join(t, node)
	}
	if guest != nil {
		c.Guest = guest.ready(t, c)
		c.joinGuest(t, c.Guest)
	}
	c.installFlannel(t)
	for _, node := range c.Nodes {
		c.waitReady(t, node.Name, 3*time.Minute)
	}
	if c.Guest != nil {
		// Its kubelet pulls and starts kube-proxy and flannel under emulation.
		c.waitReady(t, c.Guest.Name, 15*time.Minute)
	}
	return c
}

// waitReady waits until the node's Ready condition is True.
func (c *Cluster) waitReady(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, timeout, "node "+name+" Ready", func() error {
		out, err := c.Kubectl(t, "get", "node", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && out != "True" {
			err = fmt.Errorf("Ready=%q", out)
		}
		return err
	})
}

// preflightIgnored are kubeadm's preflight checks this host cannot pass: it
// has swap on and a cgroup v1 kernel (SystemVerification warns of v1), and
// no systemd to manage the kubelet service (the test starts the kubelet).
var preflightIgnored = []string{"Swap", "SystemVerification", "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables", "Service-Kubelet"}

// nodeRegistration is a node's part of kubeadm's init or join config: its
// name, CRI socket and address, the kubelet's cgroup root (none: "") and the
// preflight errors to ignore. taints is "  taints: []\n" (no taint) or empty
// (kubeadm's default: the control-plane taint on init, none on join).
func nodeRegistration(name, criSocket string, ip net.IP, cgroupRoot, taints string, ignore []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `nodeRegistration:
  name: %s
  criSocket: %s
  imagePullPolicy: IfNotPresent
  ignorePreflightErrors: [%s]
%s  kubeletExtraArgs:
  - {name: node-ip, value: %q}
`, name, criSocket, strings.Join(ignore, ", "), taints, ip)
	if cgroupRoot != "" {
		fmt.Fprintf(&b, "  - {name: cgroup-root, value: %q}\n", cgroupRoot)
	}
	return b.String()
}

// registration is nodeRegistration for a namespace node.
func (n *Node) registration(taints string) string {
	return nodeRegistration(n.Name, n.CRIEndpoint(), n.IP, "/"+n.CgroupRoot, taints, preflightIgnored)
}

// initFirst runs kubeadm init on the first node.
func (c *Cluster) initFirst(t testing.TB) {
	t.Helper()
	n := c.Nodes[0]
	taints := "  taints: []\n"
	if c.controlPlaneTaint {
		taints = ""
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %q
  ttl: 1h
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
%s---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
clusterName: shimd-kubeadm
controlPlaneEndpoint: "%s:6443"
networking:
  podSubnet: %s
  serviceSubnet: %s
  dnsDomain: cluster.local
etcd:
  local:
    dataDir: /var/lib/etcd
    extraArgs:
    - {name: unsafe-no-fsync, value: "true"}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
resolvConf: ""
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, Token, n.IP, n.registration(taints), version(t), n.IP, PodSubnet, ServiceSubnet)
	path := filepath.Join(n.Dir, "kubeadm-init.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	c.kubeadm(t, n, "init", "--config", path, "--v", "2")
	c.Kubeconfig = n.Path("/etc/kubernetes/admin.conf")
	// CoreDNS forwards nowhere: its Corefile without the forward plugin.
	cm, err := c.Kubectl(t, "-n", "kube-system", "get", "configmap", "coredns", "-o", "json")
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	patched := strings.Join(dropForward(strings.Split(cm, `\n`)), `\n`)
	if patched == cm {
		harness.Fatalf(t, "kubeadm: no forward line in CoreDNS's Corefile: %s", cm)
	}
	if out, err := c.KubectlIn(t, strings.NewReader(patched), "replace", "-f", "-"); err != nil {
		harness.Fatalf(t, "kubeadm: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "-n", "kube-system", "rollout", "restart", "deployment", "coredns"); err != nil {
		harness.Fatalf(t, "kubeadm: %v\n%s", err, out)
	}
}

// join runs kubeadm join on n against the first node.
func (c *Cluster) join(t testing.TB, n *Node) {
	t.Helper()
	cfg := c.joinConfig(t, n.registration("  taints: []\n"))
	path := filepath.Join(n.Dir, "kubeadm-join.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	c.kubeadm(t, n, "join", "--config", path, "--v", "2")
}

// joinConfig is kubeadm's JoinConfiguration against the first node, with
// more: the node's part (nodeRegistration, patches).
func (c *Cluster) joinConfig(t testing.TB, more string) string {
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "%s:6443"
    token: %q
    caCertHashes: [%q]
%s`, c.Nodes[0].IP, Token, caHash(t, c.Nodes[0].Path("/etc/kubernetes/pki/ca.crt")), more)
}

// kubeadm runs kubeadm init or join in the node and, when kubeadm has written
// the kubelet's config and flags (its kubelet-start phase, where it would ask
// systemd to start the kubelet), starts the kubelet in the node.
func (c *Cluster) kubeadm(t testing.TB, n *Node, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logPath := filepath.Join(n.Dir, "kubeadm-"+args[0]+".log")
	log, err := os.Create(logPath)
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	defer log.Close()
	cmd := n.Command(ctx, Bin("kubeadm"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its preflight runs "kubelet --version".
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(Bin("kubelet"))+":"+os.Getenv("PATH"))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	flags := n.Path("/var/lib/kubelet/kubeadm-flags.env")
	started := false
	for {
		select {
		case err := <-done:
			if err != nil {
				b, _ := os.ReadFile(logPath)
				harness.Fatalf(t, "kubeadm %s on %s: %v\n%s", args[0], n.Name, err, tail(b, 60))
			}
			t.Logf("kubeadm %s on %s: %s", args[0], n.Name, time.Since(start).Round(time.Second))
			if !started {
				harness.Fatalf(t, "kubeadm %s on %s finished without writing %s", args[0], n.Name, flags)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if !started && exists(flags) && exists(n.Path("/var/lib/kubelet/config.yaml")) {
			n.startKubelet(t)
			started = true
		}
	}
}

// startKubelet starts the kubelet in the node as kubeadm's systemd drop-in
// does: its flags file, the bootstrap and final kubeconfigs, the config file.
func (n *Node) startKubelet(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(n.Path("/var/lib/kubelet/kubeadm-flags.env"))
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	line := strings.TrimSpace(string(b))
	line = strings.TrimPrefix(line, "KUBELET_KUBEADM_ARGS=")
	line = strings.Trim(line, `"`)
	args := append(n.Wrap()[1:], Bin("kubelet"),
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml")
	args = append(args, strings.Fields(line)...)
	n.Kubelet = harness.StartDaemon(t, "kubelet "+n.Name, "nsenter", args, filepath.Join(n.Dir, "kubelet.log"), time.Minute, nil)
	t.Cleanup(func() {
		// The kubelet bind-mounts its root dir: gone with the mount namespace.
		n.Kubelet.Stop()
	})
}

// caHash is kubeadm's discovery hash of the cluster CA: sha256 of its public key info.
func caHash(t testing.TB, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		harness.Fatalf(t, "kubeadm: no PEM in %s", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// version is the Kubernetes release of the binaries (kubeadm version -o short).
func version(t testing.TB) string {
	out, err := exec.Command(Bin("kubeadm"), "version", "-o", "short").Output()
	if err != nil {
		harness.Fatalf(t, "kubeadm version: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// WaitFor is cluster.Cluster's WaitFor that logs the cluster's pods and the
// logs of those not ready when it gives up.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	c.Cluster.WaitFor(t, timeout, what, func() error {
		err := check()
		if err != nil && time.Now().After(deadline) {
			c.dump(t)
		}
		return err
	})
}

// hostSysctls are what the kubelet sets host-wide (they are not per network
// namespace); saved and restored.
var hostSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func saveSysctls(t testing.TB) func() {
	saved := map[string][]byte{}
	for _, s := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			harness.Fatalf(t, "kubeadm: %v", err)
		}
		saved[s] = b
	}
	return func() {
		for s, b := range saved {
			if err := os.WriteFile("/proc/sys/"+s, b, 0o644); err != nil {
				t.Errorf("kubeadm: restore %s: %v", s, err)
			}
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func tail(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
