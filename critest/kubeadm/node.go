//go:build integration

package kubeadm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
)

// nodeMounts are the host paths each node has its own copy of (a directory
// under the node's Dir, bind-mounted in the node's mount namespace), by the
// name of that directory. /var/lib and /var/log are replaced whole: nothing in
// a node needs the host's, and a mount point made on the host for
// /var/lib/kubelet would meet critest/kubelet's tests, which check whether
// /var/lib/kubelet existed before their kubelet and remove it if not.
var nodeMounts = map[string]string{
	"etc-kubernetes": "/etc/kubernetes",
	"var-lib":        "/var/lib",       // kubelet, etcd, cni (host-local's leases)
	"var-log":        "/var/log",       // pods, containers
	"shimd/net.d":    "/etc/cni/net.d", // shimd's conf_dir: flannel's DaemonSet writes the network there
	"run-flannel":    "/run/flannel",
	// kube-proxy's DaemonSet mounts /lib/modules (a hostPath without a type:
	// the kubelet does not create it, shimd would make it on the host). Every
	// real node has it; this machine's kernel has no modules directory.
	"lib-modules": "/lib/modules",
}

// nodeSubdirs are made in each node's copies of /var/lib and /var/log.
var nodeSubdirs = []string{"var-lib/kubelet", "var-lib/etcd", "var-lib/cni", "var-log/pods", "var-log/containers"}

// Node is one node's namespaces and daemons.
type Node struct {
	Name string
	IP   net.IP
	Dir  string // on the host: the node's directories, configs and logs
	// CgroupRoot is the kubelet's cgroup root ("shimd-kadm-..."): the node's pods
	// live under /<CgroupRoot>/kubepods in every hierarchy.
	CgroupRoot string

	netns      string // name under /run/netns
	hostVeth   string
	holder     *exec.Cmd // sleeps in the node's mount and UTS namespaces
	Containerd *harness.Containerd
	Shimd      *harness.Shimd
	Kubelet    *harness.Daemon
	// ContainerdCRI: the kubelet uses containerd's CRI plugin, not shimd.
	ContainerdCRI bool
}

// CRIEndpoint is the CRI socket the node's kubelet uses.
func (n *Node) CRIEndpoint() string {
	if n.ContainerdCRI {
		return "unix://" + n.Containerd.Address()
	}
	return n.Shimd.Endpoint()
}

// Path is where a path of the node (such as /etc/kubernetes/admin.conf) lies
// on the host.
func (n *Node) Path(p string) string {
	for dir, m := range nodeMounts {
		if p == m || strings.HasPrefix(p, m+"/") {
			return filepath.Join(n.Dir, dir, strings.TrimPrefix(p, m))
		}
	}
	return p
}

// Wrap is the command line that runs a program inside the node's namespaces,
// in place (nsenter execs it: the PID is the program's).
func (n *Node) Wrap() []string {
	return []string{"nsenter", "-t", strconv.Itoa(n.holder.Process.Pid), "-m", "-u", "-n", "--"}
}

// Command is an unstarted command inside the node's namespaces.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	w := n.Wrap()
	return exec.CommandContext(ctx, w[0], append(append(w[1:], name), args...)...)
}

// Run runs a command in the node (timeout 5 minutes) and returns its combined output.
func (n *Node) Run(t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s on %s: %w\n%s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// startNode makes the node's network namespace (a veth on net's bridge with
// ip/24, no default route: nothing leaves the test network), its mount and UTS
// namespaces (held by a sleeping process) with the node's own directories, and
// starts containerd and shimd inside them. hostsDir is the registry config
// (hosts.toml) shimd pulls with.
func startNode(t testing.TB, nw *network, name string, ip net.IP, hostsDir string, containerdCRI bool) *Node {
	t.Helper()
	id := nw.id + "-" + name
	n := &Node{Name: name, IP: ip, Dir: harness.NewBaseDir(t), CgroupRoot: "shimd-kadm-" + id,
		netns: "shk-" + id, hostVeth: "shk" + nw.id + name}
	for _, dir := range append(mapKeys(nodeMounts), nodeSubdirs...) {
		if err := os.MkdirAll(filepath.Join(n.Dir, dir), 0o755); err != nil {
			harness.Fatalf(t, "kubeadm: %v", err)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", n.netns).CombinedOutput(); err != nil {
			t.Errorf("kubeadm: ip netns delete %s: %v: %s", n.netns, err, out)
		}
		exec.Command("ip", "link", "delete", n.hostVeth).Run() // gone with the netns already, normally
	})
	n.startNetns(t, nw)
	var created []string
	for _, m := range nodeMounts {
		if _, err := os.Stat(m); os.IsNotExist(err) {
			created = append(created, m)
		}
	}
	t.Cleanup(func() {
		// The holder of the node's namespaces now (Reboot starts another).
		if n.holder != nil {
			n.holder.Process.Kill()
			n.holder.Wait()
		}
		for _, m := range created {
			os.Remove(m) // only if empty
		}
	})
	n.startHolder(t)
	if err := makeCgroupRoot(n.CgroupRoot); err != nil {
		harness.Fatalf(t, "kubeadm: cgroup root: %v", err)
	}
	t.Cleanup(func() { removeCgroupRoot(t, n.CgroupRoot) })

	copts := harness.ContainerdOptions{
		Dir: filepath.Join(n.Dir, "ctrd"), Namespace: "shimd-kadm-" + id, Wrap: n.Wrap(), LogLevel: "info"}
	if containerdCRI {
		n.ContainerdCRI = true
		copts.WithCRI, copts.CNIConfDir, copts.RegistryConfigPath = true, "/etc/cni/net.d", hostsDir
	}
	// The node's runc root is the shim's default, /run/containerd/runc/<namespace>,
	// as on a real node; runc leaves it when its last container goes. Removed, if
	// empty, once containerd has stopped (cleanups run last-registered first).
	t.Cleanup(func() { os.Remove(filepath.Join("/run/containerd/runc", copts.Namespace)) })
	n.Containerd = harness.StartContainerd(t, copts)
	shimdDir := filepath.Join(n.Dir, "shimd")
	n.Shimd = harness.StartShimd(t, harness.ShimdOptions{
		ContainerdAddress: n.Containerd.Address(),
		Dir:               shimdDir,
		Namespace:         "shimd-kadm-" + id,
		Wrap:              n.Wrap(),
		LogLevel:          "info",
		NoCNIConfig:       true,
		// The node's /etc/cni/net.d: flannel's DaemonSet writes the network there.
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", hostsDir),
	})
	return n
}

// startNetns makes the node's network namespace: its veth on the bridge, its
// address and routes, its sysctls (startNode removes it at the end).
func (n *Node) startNetns(t testing.TB, nw *network) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			harness.Fatalf(t, "kubeadm: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", n.netns)
	run("ip", "link", "add", n.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.netns)
	run("ip", "link", "set", n.hostVeth, "master", nw.bridge, "up")
	in := func(args ...string) { run(append([]string{"ip", "netns", "exec", n.netns}, args...)...) }
	in("ip", "addr", "add", n.IP.String()+"/24", "dev", "eth0")
	in("ip", "link", "set", "eth0", "up")
	in("ip", "link", "set", "lo", "up")
	// Services: the first packet of a connection to a ClusterIP is routed
	// before kube-proxy's DNAT; a route on eth0 (no gateway) serves.
	in("ip", "route", "add", ServiceSubnet, "dev", "eth0")
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		in("sysctl", "-qw", s)
	}
}

// startHolder starts the process that holds the node's mount and UTS
// namespaces: nsenter into the network namespace, unshare a private mount and
// UTS namespace, bind the node's directories, set the hostname, sleep
// (startNode kills it at the end).
func (n *Node) startHolder(t testing.TB) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -e\n")
	for dir, m := range nodeMounts {
		// The mount point: made on the host if missing (removed at the end
		// when still empty).
		fmt.Fprintf(&script, "mkdir -p %s && mount --bind %s %s\n", m, filepath.Join(n.Dir, dir), m)
	}
	ready := filepath.Join(n.Dir, "holder.ready")
	os.Remove(ready)
	fmt.Fprintf(&script, "hostname %s\n: >%s\nexec sleep 2147483647\n", n.Name, ready)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+n.netns, "--",
		"unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", script.String())
	log, err := os.OpenFile(filepath.Join(n.Dir, "holder.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		harness.Fatalf(t, "kubeadm: %v", err)
	}
	defer log.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		harness.Fatalf(t, "kubeadm: node holder: %v", err)
	}
	n.holder = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(n.Dir, "holder.log"))
			harness.Fatalf(t, "kubeadm: node %s's namespaces are not ready after 30s: %s", n.Name, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupHierarchies are the v1 controllers' mounts and the unified one.
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+1 < len(f) && (f[sep+1] == "cgroup" || f[sep+1] == "cgroup2") {
			out = append(out, f[4])
		}
	}
	return out, nil
}

func makeCgroupRoot(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h, root), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroupRoot removes the node's cgroup tree, retrying while tasks go away.
func removeCgroupRoot(t testing.TB, root string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := harness.RemoveCgroupTree(root)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("kubeadm: cgroups left: %v", left)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// network is the test bridge the nodes' veths hang on, with the host's address.
type network struct {
	id      string // 4 hex digits, in every name made for this run
	bridge  string
	subnet  *net.IPNet
	gateway net.IP
}

func newNetwork(t testing.TB) *network {
	t.Helper()
	var rnd [2]byte
	f, _ := os.Open("/dev/urandom")
	f.Read(rnd[:])
	f.Close()
	nw := &network{id: fmt.Sprintf("%02x%02x", rnd[0], rnd[1])}
	nw.bridge = "shkbr" + nw.id
	// 198.19.200.0/24 .. 198.19.249.0/24: outside the pod and service ranges.
	for i := 0; i < 50; i++ {
		third := 200 + (int(rnd[0])+i)%50
		_, ipn, _ := net.ParseCIDR(fmt.Sprintf("198.19.%d.0/24", third))
		if inUse(ipn) {
			continue
		}
		nw.subnet, nw.gateway = ipn, net.IPv4(198, 19, byte(third), 1).To4()
		break
	}
	if nw.subnet == nil {
		harness.Fatalf(t, "kubeadm: no free /24 in 198.19.200.0-198.19.249.0")
	}
	for _, args := range [][]string{
		{"ip", "link", "add", nw.bridge, "type", "bridge"},
		{"ip", "addr", "add", nw.gateway.String() + "/24", "dev", nw.bridge},
		{"ip", "link", "set", nw.bridge, "up"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			harness.Fatalf(t, "kubeadm: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[2] == "add" && args[1] == "link" {
			t.Cleanup(func() { exec.Command("ip", "link", "delete", nw.bridge).Run() })
		}
	}
	return nw
}

// nodeIP is the address of the i-th node (1-based): .11, .12, ...
func (nw *network) nodeIP(i int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, nw.subnet.IP.To4())
	ip[3] = byte(10 + i)
	return ip
}

func inUse(ipn *net.IPNet) bool {
	out, _ := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	addrs, _ := exec.Command("ip", "-4", "-o", "addr").Output()
	prefix := strings.TrimSuffix(ipn.IP.String(), ".0") + "."
	return bytes.Contains(out, []byte(prefix)) || bytes.Contains(addrs, []byte(prefix))
}

func mapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
