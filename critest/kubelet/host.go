//go:build integration

package kubelet

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/critest/harness"
)

// lockPath serialises kubelets on this host: each one uses the fixed
// /var/lib/kubelet/device-plugins/kubelet.sock whatever its --root-dir.
const lockPath = "/run/shimd-e2e-kubelet.lock"

// hostSysctls are the sysctls the kubelet's container manager sets
// (setupKernelTunables, protectKernelDefaults=false); saved and restored.
var hostSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Fixed paths the kubelet uses whatever its flags say.
const (
	varLibKubelet    = "/var/lib/kubelet"
	devicePluginsDir = "/var/lib/kubelet/device-plugins"
	varLogContainers = "/var/log/containers"
	cgroupRoot       = "/sys/fs/cgroup"
)

// lockHost takes the host-wide kubelet lock (waiting up to 15 minutes for
// another run) and releases it at the very end of the test.
func lockHost(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	deadline := time.Now().Add(15 * time.Minute)
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("kubelet: lock %s (another kubelet test runs): %v", lockPath, err)
		}
		if !logged {
			t.Logf("kubelet: waiting for %s: another kubelet test runs on this host", lockPath)
			logged = true
		}
		time.Sleep(time.Second)
	}
	t.Cleanup(func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	})
}

// saveHost records what the kubelet changes outside its own directory and
// returns the function that puts it back: sysctls, kubepods cgroups,
// /var/log/containers symlinks, /var/lib/kubelet/device-plugins files.
func saveHost(t testing.TB) func() {
	sysctls := map[string]string{}
	for _, s := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			t.Fatalf("kubelet: read sysctl %s: %v", s, err)
		}
		sysctls[s] = strings.TrimSpace(string(b))
	}
	hadCgroups := map[string]bool{}
	for _, h := range cgroupHierarchies() {
		hadCgroups[h] = exists(filepath.Join(h, "kubepods"))
	}
	hadVarLibKubelet := exists(varLibKubelet)
	hadDevicePlugins := listDir(devicePluginsDir)
	hadVarLogContainers := exists(varLogContainers)
	hadLogLinks := listDir(varLogContainers)

	return func() {
		for _, s := range hostSysctls {
			if err := os.WriteFile("/proc/sys/"+s, []byte(sysctls[s]+"\n"), 0o644); err != nil {
				t.Errorf("kubelet: restore sysctl %s=%s: %v", s, sysctls[s], err)
			}
		}
		killed := map[int]bool{}
		for h, had := range hadCgroups {
			if !had {
				removeCgroupTree(t, filepath.Join(h, "kubepods"), killed)
			}
		}
		// Symlinks to container logs that the kubelet did not remove.
		for name := range listDir(varLogContainers) {
			if !hadLogLinks[name] {
				os.Remove(filepath.Join(varLogContainers, name))
			}
		}
		if !hadVarLogContainers {
			os.Remove(varLogContainers) // only if empty
		}
		if !hadVarLibKubelet {
			if m := mountPointsUnder(varLibKubelet); len(m) > 0 {
				t.Errorf("kubelet: not removing %s: mounts below it: %v", varLibKubelet, m)
			} else {
				os.RemoveAll(varLibKubelet)
			}
		} else {
			for name := range listDir(devicePluginsDir) {
				if !hadDevicePlugins[name] {
					os.Remove(filepath.Join(devicePluginsDir, name))
				}
			}
		}
	}
}

// cgroupHierarchies lists the cgroup v1 hierarchies and the unified one.
func cgroupHierarchies() []string {
	var out []string
	ents, _ := os.ReadDir(cgroupRoot)
	for _, e := range ents {
		if e.IsDir() { // not the cpu,cpuacct style symlinks
			out = append(out, filepath.Join(cgroupRoot, e.Name()))
		}
	}
	return out
}

// removeCgroupTree removes a cgroup directory and its children, deepest
// first. The tree is the one this test's kubelet created; a process still in
// it belongs to a pod that neither the kubelet nor shimd took down (say,
// after containerd stopped answering): it is reported and killed by PID, so
// that no workload outlives the test. killed collects the PIDs across
// hierarchies.
func removeCgroupTree(t testing.TB, dir string, killed map[int]bool) {
	if !exists(dir) {
		return
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		for _, pid := range cgroupPIDs(d) {
			if !killed[pid] {
				killed[pid] = true
				cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				t.Errorf("kubelet: pod process %d (%s) still in %s at the end: killing it",
					pid, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), d)
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		// Retry: a cgroup is busy until its last process is reaped.
		var err error
		for i := 0; i < 50; i++ {
			if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("kubelet: cgroup %s left behind: %v", d, err)
		}
	}
}

// cgroupPIDs lists the processes in one cgroup directory.
func cgroupPIDs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func listDir(dir string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// mountPointsUnder lists mount points at or below dir.
func mountPointsUnder(dir string) []string {
	out, _ := harness.MountPointsUnder(dir)
	return out
}
