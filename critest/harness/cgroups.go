package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupMounts lists the mount points of every cgroup hierarchy (v1
// controllers and the cgroup2 mount of a hybrid host).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if !ok || (m.FSType != "cgroup" && m.FSType != "cgroup2") || seen[m.Point] {
			continue
		}
		seen[m.Point] = true
		out = append(out, m.Point)
	}
	return out, sc.Err()
}

// cgroupLeaks lists the cgroups left under /<namespace> in any hierarchy:
// containerd's default cgroup of a task is /<namespace>/<id>, and runc
// removes it with the task.
func cgroupLeaks(namespace string) []string {
	mounts, err := cgroupMounts()
	if err != nil {
		return []string{fmt.Sprintf("cannot list cgroup mounts: %v", err)}
	}
	var leaks []string
	for _, mnt := range mounts {
		dir := filepath.Join(mnt, namespace)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !os.IsNotExist(err) {
				leaks = append(leaks, fmt.Sprintf("cannot read %s: %v", dir, err))
			}
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				leaks = append(leaks, "cgroup "+filepath.Join(dir, e.Name())+procsIn(filepath.Join(dir, e.Name())))
			}
		}
	}
	return leaks
}

// procsIn describes the processes in a cgroup, for a leak message.
func procsIn(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return " (empty)"
	}
	return " (pids " + strings.Join(strings.Fields(string(b)), ",") + ")"
}

// removeNamespaceCgroups removes the empty /<namespace> parents runc made
// in every hierarchy; the namespace's own cgroups were checked before.
func removeNamespaceCgroups(namespace string) {
	if !strings.HasPrefix(namespace, "shimd-") || strings.Contains(namespace, "/") {
		return
	}
	mounts, _ := cgroupMounts()
	for _, mnt := range mounts {
		_ = os.Remove(filepath.Join(mnt, namespace))
	}
}

// RemoveEmptyCgroups removes the empty cgroup /<parent> in every hierarchy, for
// tests that run runc themselves under a parent of their own ("shimd-" prefix).
func RemoveEmptyCgroups(parent string) { removeNamespaceCgroups(parent) }

// RemoveCgroupTree removes the empty cgroup /<root> ("shimd-" prefix) and the empty
// cgroups below it in every hierarchy, deepest first, and lists those left: one whose
// task is still going away stays busy for a moment, so callers retry until a deadline.
func RemoveCgroupTree(root string) []string {
	if !strings.HasPrefix(root, "shimd-") || strings.Contains(root, "/") {
		return []string{"not a test cgroup root: " + root}
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return []string{fmt.Sprintf("cannot list cgroup mounts: %v", err)}
	}
	var left []string
	for _, mnt := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(mnt, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // WalkDir lists parents first
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				left = append(left, "cgroup "+dirs[i]+procsIn(dirs[i]))
			}
		}
	}
	return left
}
