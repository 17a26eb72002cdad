package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/log"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// What shimd reads of a task's cgroup itself, beside containerd's metrics.
//
// Pressure stall information (PSI): on a cgroup v2 host the shim's metrics carry it
// (cpu.pressure, memory.pressure and io.pressure of the container's cgroup). On a
// cgroup v1 host they cannot, but a hybrid host (cgroup2 mounted beside the v1
// hierarchies, at /sys/fs/cgroup/unified) keeps PSI per cgroup2 group all the same,
// and runc puts each container into that hierarchy too, under the same path as in the
// v1 ones. So shimd finds the task's process's cgroup2 group in /proc/<pid>/cgroup,
// takes it only when it is the container's own (the same path as its v1 memory
// cgroup; on a v2 host, always), and reads the pressure files there. A pod's pressure
// is its cgroup's: the parent of its tasks' groups, when that is the pod's cgroup
// parent. Where there is no such group, or the kernel keeps no PSI (no CONFIG_PSI,
// psi=0: the files are missing or cannot be read), pressure stays nil.

// hostFS says where the host's proc, sys and cgroup file systems are; the zero value
// reads nothing.
type hostFS struct {
	proc, sys string
	// cgroup2 is where the cgroup2 hierarchy is mounted ("" when it is not).
	cgroup2 string
	// v1 are the v1 hierarchies by controller (cpuacct, memory, pids); unifiedOnly is
	// a host with cgroup2 alone.
	v1          map[string]cgroupMount
	unifiedOnly bool
}

// cgroupMount is where a v1 hierarchy is mounted, and which of its groups is there
// (root: "/" unless a group was bind-mounted or shimd runs in a cgroup namespace).
type cgroupMount struct{ point, root string }

// detectHost finds where cgroup2 is mounted (/sys/fs/cgroup on a v2 host,
// /sys/fs/cgroup/unified on a hybrid one) and the v1 hierarchies.
func detectHost() hostFS {
	h := hostFS{proc: "/proc", sys: "/sys", v1: map[string]cgroupMount{}}
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "cgroup" && m.FSType != "cgroup2", false
	})
	if err != nil {
		log.L.WithError(err).Warn("stats: find the cgroup mounts")
	}
	for _, m := range ms {
		if m.FSType == "cgroup2" {
			if h.cgroup2 == "" {
				h.cgroup2 = m.Mountpoint
			}
			continue
		}
		for _, opt := range strings.Split(m.VFSOptions, ",") {
			if _, seen := h.v1[opt]; !seen && (opt == "cpuacct" || opt == "memory" || opt == "pids") {
				h.v1[opt] = cgroupMount{point: m.Mountpoint, root: strings.TrimSuffix(m.Root, "/")}
			}
		}
	}
	h.unifiedOnly = h.cgroup2 != "" && len(h.v1) == 0
	return h
}

// psiSet is the pressure of one cgroup; nil where the kernel has none.
type psiSet struct{ cpu, memory, io *v2.PSIStats }

// ownGroup returns the directory of pid's cgroup2 group when it is the task's own
// group: on a hybrid host, only if it has the same path as the pid's v1 memory cgroup
// (else the task never joined the unified hierarchy, and the group it inherited is
// someone else's). "" when there is none.
func (h hostFS) ownGroup(pid uint32) string {
	if h.proc == "" || h.cgroup2 == "" || pid == 0 {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(h.proc, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return ""
	}
	return h.ownGroupOf(data)
}

// ownGroupOf is ownGroup of a process whose /proc/<pid>/cgroup holds procCgroup.
func (h hostFS) ownGroupOf(procCgroup []byte) string {
	if h.cgroup2 == "" {
		return ""
	}
	unified, v1 := parseProcCgroup(procCgroup)
	if unified == "" || unified == "/" {
		return ""
	}
	if mem, ok := v1["memory"]; ok && mem != unified {
		return ""
	}
	if len(v1) > 0 && !slices.Contains(slices.Collect(maps.Values(v1)), unified) {
		return ""
	}
	return filepath.Join(h.cgroup2, unified)
}

// parseProcCgroup reads /proc/<pid>/cgroup: the cgroup2 path (the "0::" line) and
// the v1 paths by controller (named hierarchies such as name=systemd left out).
func parseProcCgroup(data []byte) (unified string, v1 map[string]string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			if ctrl != "" && !strings.HasPrefix(ctrl, "name=") {
				v1[ctrl] = parts[2]
			}
		}
	}
	return unified, v1
}

// podGroup is the pod's cgroup2 group: the parent of one of its tasks' own groups,
// when that parent is the pod's cgroup parent (its last element, so that both a
// cgroupfs path and a systemd slice name match). "" when the pod has no cgroup parent
// (its tasks' parent is then shared with other pods).
func podGroup(taskGroup, cgroupParent string) string {
	if taskGroup == "" || cgroupParent == "" {
		return ""
	}
	dir := filepath.Dir(taskGroup)
	if filepath.Base(dir) != path.Base(strings.TrimRight(cgroupParent, "/")) {
		return ""
	}
	return dir
}

// readPSI reads the pressure files of a cgroup2 group ("" reads nothing).
func readPSI(dir string) psiSet {
	if dir == "" {
		return psiSet{}
	}
	return psiSet{
		cpu:    readPSIFile(filepath.Join(dir, "cpu.pressure")),
		memory: readPSIFile(filepath.Join(dir, "memory.pressure")),
		io:     readPSIFile(filepath.Join(dir, "io.pressure")),
	}
}

// readPSIFile parses a pressure file ("some avg10=0.00 avg60=0.00 avg300=0.00
// total=0", then a "full" line); nil if it is missing, unreadable (psi=0 answers
// EOPNOTSUPP) or malformed.
func readPSIFile(file string) *v2.PSIStats {
	bp := fileBufs.Get().(*[]byte)
	defer fileBufs.Put(bp)
	data, err := readInto(file, *bp)
	if err != nil {
		return nil
	}
	out, err := parsePSI(data)
	if err != nil {
		return nil
	}
	return out
}

func parsePSI(data []byte) (*v2.PSIStats, error) {
	out := &v2.PSIStats{}
	all := data
	for data = bytes.TrimSpace(data); len(data) > 0; {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		kind, rest, _ := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if len(kind) == 0 {
			continue
		}
		d := &v2.PSIData{}
		switch string(kind) {
		case "some":
			out.Some = d
		case "full":
			out.Full = d
		default:
			return nil, fmt.Errorf("pressure line %q", line)
		}
		for len(rest) > 0 {
			var f []byte
			if f, rest, _ = bytes.Cut(rest, []byte(" ")); len(f) == 0 {
				continue
			}
			k, v, ok := bytes.Cut(f, []byte("="))
			if !ok {
				return nil, fmt.Errorf("pressure field %q", f)
			}
			var err error
			switch string(k) {
			case "avg10":
				d.Avg10, err = strconv.ParseFloat(string(v), 64)
			case "avg60":
				d.Avg60, err = strconv.ParseFloat(string(v), 64)
			case "avg300":
				d.Avg300, err = strconv.ParseFloat(string(v), 64)
			case "total":
				d.Total, err = strconv.ParseUint(string(v), 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("pressure field %q: %w", f, err)
			}
		}
	}
	if out.Some == nil && out.Full == nil {
		return nil, fmt.Errorf("no pressure in %q", all)
	}
	return out, nil
}

// hasFile tells whether a cgroup2 group has a file (memory.swap.current: swap is
// accounted).
func hasFile(dir, name string) bool {
	if dir == "" {
		return false
	}
	return unix.Access(filepath.Join(dir, name), unix.F_OK) == nil
}

// blockDevice names a block device as cAdvisor does ("/dev/vda"), from
// /sys/dev/block/MAJOR:MINOR/uevent; "MAJOR:MINOR" when it cannot be found.
func (h hostFS) blockDevice(major, minor uint64) string {
	id := fmt.Sprintf("%d:%d", major, minor)
	if h.sys == "" {
		return id
	}
	data, err := os.ReadFile(filepath.Join(h.sys, "dev", "block", id, "uevent"))
	if err != nil {
		return id
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok && name != "" {
			return "/dev/" + name
		}
	}
	return id
}
