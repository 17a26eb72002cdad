package container

import (
	"github.com/containerd/log"

	"github.com/shimd/shimd/stats"
)

// Telling an OOM kill. The shim sends TaskOOM when the oom_kill count in the
// container's memory.events rises; shimd marks the container, and its exit is
// OOMKilled. With the systemd cgroup driver on cgroup v2 that event can be lost:
// systemd removes a scope's cgroup as soon as its last process is gone, and when
// the kernel kills the whole group (memory.oom.group=1, which the kubelet sets) the
// shim may read memory.events only after that (runc#5071; containerd's own CI skips
// critest's OOMKilled case under systemd for it). The pod's cgroup outlives its
// containers' and counts their OOM kills too (memory.events is hierarchical). So
// shimd reads the pod's count when it creates a task, and a task that dies of
// SIGKILL that shimd did not send, with no TaskOOM, is OOMKilled when the pod's
// count rose meanwhile.

// exitStatusSIGKILL is a task's exit status after SIGKILL (128 + 9).
const exitStatusSIGKILL = 137

// podOOMBase is the pod's cgroup2 group and its OOM kill count at task create; the
// zero value (no such group) tells nothing.
type podOOMBase struct {
	group string
	kills uint64
}

// readPodOOMBase reads the pod's OOM kill count through the new task's process pid.
func readPodOOMBase(pid uint32, cgroupParent string) podOOMBase {
	return readPodOOMBaseOf(stats.PodGroup(pid, cgroupParent))
}

// readPodOOMBaseOf reads the OOM kill count of the pod's group ("" reads nothing).
func readPodOOMBaseOf(group string) podOOMBase {
	if group == "" {
		return podOOMBase{}
	}
	kills, ok := stats.OOMKillsIn(group)
	if !ok {
		return podOOMBase{}
	}
	return podOOMBase{group: group, kills: kills}
}

// oomKilled says whether c's exit with status was an OOM kill.
func oomKilled(c *Container, status uint32) bool {
	ooms, base, killedByShimd := c.oomFacts()
	switch {
	case ooms > 0:
		return true
	case status != exitStatusSIGKILL || killedByShimd || base.group == "":
		return false
	}
	kills, ok := stats.OOMKillsIn(base.group)
	if ok && kills > base.kills {
		log.L.WithField("container", c.ID).WithField("pod_oom_kills", kills-base.kills).
			Info("no OOM event for the container, but its SIGKILL came with OOM kills in its pod's cgroup: OOMKilled")
		return true
	}
	return false
}
