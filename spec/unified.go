package spec

import (
	"maps"
	"slices"
	"strings"
)

// The unified (cgroup v2) map goes to runc as it is: runc writes each value to the
// file of the container's cgroup that its key names (fs2 setUnified; with the systemd
// driver it also turns a few keys into unit properties). runc checks only that a key
// has no '/'; it writes "cgroup.*" keys too (it leaves "cgroup" out of its check for
// a missing controller), and what the kernel refuses fails the container at start.
// So shimd checks the map at the CRI edge, before anything is made, with one rule
// (CheckUnified) used by CreateContainer, UpdateContainerResources, RunPodSandbox and
// UpdatePodSandboxResources:
//
//  1. A key is a cgroup v2 interface file name as the kernel spells it:
//     "<controller>.<file>", at most NAME_MAX bytes, dot-separated parts of lowercase
//     letters, digits and '_', the first (the controller) starting with a letter.
//     The one exception is hugetlb's page size part, digits then "KB", "MB" or "GB"
//     ("hugetlb.2MB.max", "hugetlb.1GB.rsvd.max"). No '/', "..", empty part, white
//     space or upper case ("Memory.High" names no file). The controller is not held
//     to a list: the runtime spec says configuration unknown to the runtime MUST
//     still be written, and runc reports a controller the cgroup lacks.
//  2. No cgroup core file ("cgroup.*"). They hold the hierarchy (subtree_control,
//     type, max.depth, max.descendants) and its membership (procs, threads), the
//     freezer and kill switch runc drives itself (freeze, kill), the PSI accounting
//     the kubelet reads (pressure), or are read-only (controllers, events, stat).
//     None is a resource setting of the container.
//  3. No file that only reports: statistics and state named by their last part,
//     "current", "peak", "stat", "numa_stat", "events", "effective", "capacity",
//     "isolated", each also with ".local" after it (memory.current, memory.stat,
//     cpu.stat.local, pids.events.local, cpuset.cpus.effective,
//     hugetlb.2MB.rsvd.current), and the PSI files "*.pressure" (writing one only
//     adds a trigger that dies with the writer's descriptor).
//
// Values are not parsed (the kernel does that, and keys that duplicate a typed CRI
// field, such as memory.max or cpu.weight, pass as they are). A value is refused if
// it holds NUL or '\r', or is longer than the kernel takes in one write (a page,
// maxUnifiedValue). '\n' separates entries only in the keyed files that take one
// entry per write (multiLineFiles: runc writes such values line by line, runc commit
// 771903608, and the runtime spec's own example is a two-device io.max); in any other
// file a newline is refused.

// maxUnifiedValue is the longest value: cgroup files take at most a page per write.
const maxUnifiedValue = 4096

// maxUnifiedKey is NAME_MAX: a key is one file name.
const maxUnifiedKey = 255

// multiLineFiles take one "<device or resource> <settings>" entry per write, so a
// value of several lines sets several entries.
var multiLineFiles = map[string]bool{
	"io.max": true, "io.weight": true, "io.bfq.weight": true, "io.latency": true, "rdma.max": true, "misc.max": true,
}

// reportOnly are the last parts (before an optional ".local") of files that only
// report.
var reportOnly = map[string]bool{
	"current": true, "peak": true, "stat": true, "numa_stat": true, "events": true,
	"effective": true, "capacity": true, "isolated": true, "pressure": true,
}

// CheckUnified refuses (InvalidArgument, naming field and the key) a unified map that
// breaks the rule above. Keys are checked in order, so the error is the same each time.
func CheckUnified(field string, unified map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(unified)) {
		if why := unifiedKeyProblem(k); why != "" {
			return invalid(field, "key %.64q: %s", k, why)
		}
		if why := unifiedValueProblem(k, unified[k]); why != "" {
			return invalid(field, "value of %.64q: %s", k, why)
		}
	}
	return nil
}

func unifiedKeyProblem(k string) string {
	if len(k) > maxUnifiedKey {
		return "longer than a file name"
	}
	parts := strings.Split(k, ".")
	if len(parts) < 2 {
		return `not a cgroup v2 file name ("<controller>.<file>")`
	}
	for i, p := range parts {
		if !cgroupNamePart(p, i == 0, i == 1 && parts[0] == "hugetlb") {
			return "not a cgroup v2 file name (lowercase letters, digits and '_' in dot-separated parts)"
		}
	}
	if parts[0] == "cgroup" {
		return "a cgroup core file: the hierarchy, membership, freezing and killing belong to runc and the kubelet"
	}
	last := parts[len(parts)-1]
	if last == "local" && len(parts) > 2 {
		last = parts[len(parts)-2]
	}
	if reportOnly[last] {
		return "a file that only reports (statistics, state or pressure), not a setting"
	}
	return ""
}

// cgroupNamePart: lowercase letters, digits and '_', a letter first in the
// controller; hugetlb's page size is digits then KB, MB or GB.
func cgroupNamePart(p string, controller, pageSize bool) bool {
	if n, ok := strings.CutSuffix(p, "B"); pageSize && ok && len(n) >= 2 &&
		strings.IndexByte("KMG", n[len(n)-1]) >= 0 && digits(n[:len(n)-1]) {
		return true
	}
	if p == "" || (controller && (p[0] < 'a' || p[0] > 'z')) {
		return false
	}
	for _, c := range []byte(p) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func unifiedValueProblem(k, v string) string {
	switch {
	case len(v) > maxUnifiedValue:
		return "longer than 4096 bytes"
	case strings.ContainsAny(v, "\x00\r"):
		return "holds a NUL byte or a carriage return"
	case strings.ContainsRune(v, '\n') && !multiLineFiles[k]:
		return "holds a newline: only io.max, io.weight, io.bfq.weight, io.latency, rdma.max and misc.max take one entry per line"
	}
	return ""
}
