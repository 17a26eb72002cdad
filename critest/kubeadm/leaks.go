//go:build integration

package kubeadm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostRuleMarks pick the host's iptables lines that would be the cluster's:
// kube-proxy's and flannel's chains, the pod and service ranges.
var hostRuleMarks = []string{"KUBE-SERVICES", "KUBE-PROXY", "KUBE-NODEPORTS", "FLANNEL", PodSubnet, ServiceSubnet}

// leakCheck is registered first, so it runs after every other cleanup: the
// host keeps none of the cluster's network namespaces, links, mounts,
// cgroups, processes or iptables rules. Rules kube-proxy and flannel made
// live in the nodes' network namespaces and go with them.
type leakCheck struct {
	id       string   // the network's id, in every name made for this run
	dirs     []string // the nodes' directories
	rules    map[string]bool
	mountPts []string // the node paths that were missing on the host
}

func startLeakCheck(t testing.TB) *leakCheck {
	lc := &leakCheck{rules: hostRules()}
	for _, m := range nodeMounts {
		if _, err := os.Stat(m); os.IsNotExist(err) {
			lc.mountPts = append(lc.mountPts, m)
		}
	}
	t.Cleanup(func() { lc.check(t) })
	return lc
}

func hostRules() map[string]bool {
	rules := map[string]bool{}
	out, _ := exec.Command("iptables-save").Output()
	for _, l := range strings.Split(string(out), "\n") {
		for _, m := range hostRuleMarks {
			if strings.Contains(l, m) {
				rules[l] = true
			}
		}
	}
	return rules
}

func (lc *leakCheck) check(t testing.TB) {
	if lc.id == "" {
		return // no network was made
	}
	var left []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		left = lc.leftovers()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("kubeadm: the cluster left on the host:\n%s", strings.Join(left, "\n"))
	}
}

func (lc *leakCheck) leftovers() []string {
	var left []string
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "shk-"+lc.id+"-") {
			left = append(left, "netns "+l)
		}
	}
	out, _ = exec.Command("ip", "-o", "link").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "shk") && strings.Contains(f[1], lc.id) {
			left = append(left, "link "+f[1])
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			f := strings.Fields(l)
			if len(f) > 4 && lc.ours(f[4]) {
				left = append(left, "mount "+f[4])
			}
		}
	}
	if hs, err := cgroupHierarchies(); err == nil {
		for _, h := range hs {
			if m, _ := filepath.Glob(filepath.Join(h, "shimd-kadm-"+lc.id+"-*")); len(m) > 0 {
				left = append(left, "cgroups "+strings.Join(m, " "))
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && lc.ours(strings.ReplaceAll(string(b), "\x00", " ")) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	for l := range hostRules() {
		if !lc.rules[l] {
			left = append(left, "iptables "+l)
		}
	}
	for _, m := range lc.mountPts {
		if _, err := os.Stat(m); err == nil {
			left = append(left, "directory "+m+" (made for the nodes' mounts)")
		}
	}
	return left
}

// ours says whether s names one of the nodes' directories.
func (lc *leakCheck) ours(s string) bool {
	for _, d := range lc.dirs {
		if strings.Contains(s, d+"/") {
			return true
		}
	}
	return false
}
