package stats

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/shimd/shimd/pod"
)

// A pod's CPU and memory are its cgroup's, as containerd's CRI plugin reports them
// (its podsandbox controller's Metrics reads the pod's cgroup parent): the kernel's
// hierarchical counters of everything the pod ran. They include the pause process,
// containers that have exited (CPU time stays with the parent when a child cgroup
// goes; page cache and shared memory stay charged to it) and anything charged to the
// pod's cgroup itself, and its CPU time never goes down while the pod lives.
//
// shimd puts a pod's tasks (pause and containers) under the cgroup parent the kubelet
// gives (pod.CgroupPath): <parent>/<id> with cgroupfs; with the systemd driver, a
// scope in the slice the parent names, whose directory is the slice expanded
// (kubepods-besteffort-pod1.slice is kubepods.slice/kubepods-besteffort.slice/
// kubepods-besteffort-pod1.slice). So the pod's cgroup is that directory, in each v1
// hierarchy or in the unified one. A pod without a cgroup parent shares its tasks'
// parent (/<namespace>) with every other such pod, and a pause-less pod has no
// cgroup until its first container's task makes it: both are read as the sum of their
// tasks' groups, as before (pod.go).

// podRel is the pod's cgroup, relative to a hierarchy's root: "" when it has none
// (no cgroup parent, or a systemd parent that is not a slice name).
func podRel(parent, driver string) string {
	if parent == "" {
		return ""
	}
	if driver == "systemd" {
		rel, err := expandSlice(path.Base(parent))
		if err != nil {
			return ""
		}
		return rel
	}
	return path.Clean("/" + parent)
}

// expandSlice turns a systemd slice name into its cgroup path, as runc's systemd
// driver does (opencontainers/cgroups/systemd.ExpandSlice, not imported for one
// function: that package brings runc's whole cgroup manager): a-b-c.slice is
// /a.slice/a-b.slice/a-b-c.slice; -.slice is the root.
func expandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || name == "" || strings.Contains(slice, "/") {
		return "", fmt.Errorf("invalid slice name %q", slice)
	}
	if name == "-" {
		return "/", nil
	}
	var out, prefix string
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			return "", fmt.Errorf("invalid slice name %q", slice)
		}
		out += "/" + prefix + part + ".slice"
		prefix += part + "-"
	}
	return out, nil
}

// podDirs are the directories of the pod's cgroup (see podRel) in the host's
// hierarchies; ok is false when the pod has no cgroup of its own or the root itself.
// On a hybrid host, group is its cgroup2 group (for pressure), where runc mirrors
// its tasks' v1 groups.
func (h hostFS) podDirs(rel string) (d cgroupDirs, ok bool) {
	if rel == "" || rel == "/" {
		return cgroupDirs{}, false
	}
	if h.unifiedOnly {
		if h.cgroup2 == "" {
			return cgroupDirs{}, false
		}
		return cgroupDirs{unified: filepath.Join(h.cgroup2, rel)}, true
	}
	for ctrl, dst := range map[string]*string{"cpuacct": &d.cpuacct, "memory": &d.memory, "pids": &d.pids} {
		m, ok := h.v1[ctrl]
		if !ok {
			if ctrl == "pids" {
				continue
			}
			return cgroupDirs{}, false
		}
		// runc joins the mount point and the path, whatever group is mounted there.
		*dst = filepath.Join(m.point, rel)
	}
	if h.cgroup2 != "" {
		d.group = filepath.Join(h.cgroup2, rel)
	}
	return d, true
}

// podCgroupSample reads the pod's cgroup (see podRel); an error wraps errNoDirect
// when the pod has none or it cannot be read (not made yet, or gone).
func (s *Collector) podCgroupSample(sb pod.Pod) (cgroupSample, error) {
	d, ok := s.host.podDirs(podRel(sb.Config.GetLinux().GetCgroupParent(), s.opts.CgroupDriver))
	if !ok {
		return cgroupSample{}, fmt.Errorf("%w: pod %s has no cgroup of its own", errNoDirect, sb.ID)
	}
	data, at, err := readDirect(d)
	if err != nil {
		return cgroupSample{}, err
	}
	return sampleOf(hostFacts(taskMetrics{data: data, at: at, group: d.group}))
}
