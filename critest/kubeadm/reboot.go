//go:build integration

package kubeadm

import (
	"bufio"
	"bytes"
	"fmt"
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

// Reboot cuts node n's power and boots it again, as far as one machine can
// play it:
//
//   - every process of the node is killed with SIGKILL, the daemons first
//     (kubelet, shimd, containerd), then everything in the node's mount
//     namespace (the shims, the holder) and in its cgroups (the pods'
//     processes), again until none is left;
//   - what a boot does not keep goes: the node's mount, UTS and network
//     namespaces (every mount, link, route and iptables rule in them, the pods'
//     network namespaces with them), its cgroups, and what a real node keeps
//     on tmpfs: containerd's state and shim sockets, runc's state, shimd's
//     state_dir, /run/flannel. On-disk state stays: containerd's root, shimd's
//     root_dir, /var/lib/kubelet, /var/lib/cni (host-local's leases), /etc;
//   - the node comes up as systemd would bring it up: its network, containerd,
//     shimd, the kubelet.
func (c *Cluster) Reboot(t testing.TB, n *Node) {
	t.Helper()
	mntns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Process.Pid))
	if err != nil {
		harness.Fatalf(t, "kubeadm: %s's mount namespace: %v", n.Name, err)
	}
	n.Kubelet.Kill()
	n.Shimd.Kill9()
	n.Containerd.Kill()
	deadline := time.Now().Add(30 * time.Second)
	killed := map[int]bool{}
	for {
		pids := n.processes(mntns)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			harness.Fatalf(t, "kubeadm: %s: processes left after SIGKILL for 30s: %v", n.Name, pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.holder.Wait()
	t.Logf("reboot of %s: kubelet, shimd, containerd and %d processes killed", n.Name, len(killed))

	if out, err := exec.Command("ip", "netns", "delete", n.netns).CombinedOutput(); err != nil {
		harness.Fatalf(t, "kubeadm: ip netns delete %s: %v: %s", n.netns, err, out)
	}
	// The kernel frees the namespace, and the veth's peer in it, in the
	// background: the host's end goes now, so that its name is free again.
	exec.Command("ip", "link", "delete", n.hostVeth).Run()
	for end := time.Now().Add(10 * time.Second); exec.Command("ip", "link", "show", n.hostVeth).Run() == nil; {
		if time.Now().After(end) {
			harness.Fatalf(t, "kubeadm: link %s still there 10s after its namespace was deleted", n.hostVeth)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tmpfs := []string{n.Containerd.State(), filepath.Join(n.Containerd.Dir(), "s"),
		filepath.Join("/run/containerd/runc", n.Containerd.Namespace()), n.Shimd.StateDir()}
	for _, d := range tmpfs {
		if err := os.RemoveAll(d); err != nil {
			harness.Fatalf(t, "kubeadm: %v", err)
		}
	}
	flannel := filepath.Join(n.Dir, "run-flannel")
	es, _ := os.ReadDir(flannel)
	for _, e := range es {
		os.RemoveAll(filepath.Join(flannel, e.Name()))
	}
	removeCgroupRoot(t, n.CgroupRoot)
	if err := makeCgroupRoot(n.CgroupRoot); err != nil {
		harness.Fatalf(t, "kubeadm: cgroup root: %v", err)
	}

	start := time.Now()
	n.startNetns(t, c.net)
	n.startHolder(t)
	n.Containerd.SetWrap(n.Wrap())
	n.Shimd.SetWrap(n.Wrap())
	n.Containerd.Restart(t)
	n.Shimd.Start(t)
	n.startKubelet(t)
	t.Logf("reboot of %s: containerd, shimd and the kubelet up again in %s", n.Name, time.Since(start).Round(time.Millisecond))
}

// processes are the live processes of the node: those in its mount namespace
// (mntns, as /proc/PID/ns/mnt reads) and those in its cgroups. Zombies are
// left to their parents.
func (n *Node) processes(mntns string) []int {
	set := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == mntns {
			set[pid] = true
		}
	}
	if hs, err := cgroupHierarchies(); err == nil {
		for _, h := range hs {
			filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				sc := bufio.NewScanner(bytes.NewReader(b))
				for sc.Scan() {
					if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
						set[pid] = true
					}
				}
				return nil
			})
		}
	}
	var pids []int
	for pid := range set {
		if harness.Live(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
