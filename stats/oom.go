package stats

import "sync"

// hostOnce is the host's cgroup layout for the package's free functions.
var hostOnce = sync.OnceValue(detectHost)

// PodGroup is the pod's cgroup2 group: the parent of the own group of the task
// process pid, when it is the pod's cgroup parent; "" where there is none (no
// cgroup parent, or the process gone).
func PodGroup(pid uint32, cgroupParent string) string {
	return podGroup(hostOnce().ownGroup(pid), cgroupParent)
}

// OOMKillsIn is the oom_kill count of a cgroup2 group's memory.events. The kernel
// counts there the OOM kills in the group and in every group under it, so a pod's
// group keeps the count of a container whose own group is gone. ok is false where
// the group has no memory.events (no memory controller: a v1 or hybrid host).
func OOMKillsIn(group string) (uint64, bool) {
	var r fileReader
	defer r.release()
	var n uint64
	found := r.keyed(group, "memory.events", keyDst{"oom_kill", &n})
	return n, found == 1 && r.err == nil
}
