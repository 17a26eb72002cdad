package sandbox

import (
	"context"
	"os"
	"path/filepath"

	"github.com/containerd/log"

	"github.com/shimd/shimd/cgroup"
)

// removeOrphanCgroups removes the empty cgroups under /<namespace> whose id belongs to
// no task shimd knows: leftovers of a runc killed half way.
func (m *Manager) removeOrphanCgroups(ctx context.Context, known func(id string) bool) {
	if m.opts.CgroupDriver == "systemd" {
		return
	}
	for _, mnt := range cgroup.Mounts() {
		ents, _ := os.ReadDir(filepath.Join(mnt, m.opts.Namespace))
		for _, e := range ents {
			if !e.IsDir() || !isID(e.Name()) || known(e.Name()) {
				continue
			}
			if err := os.Remove(filepath.Join(mnt, m.opts.Namespace, e.Name())); err == nil {
				log.G(ctx).WithField("cgroup", filepath.Join(mnt, m.opts.Namespace, e.Name())).Info("removed orphaned cgroup")
			}
		}
	}
}

// removeCgroup removes the pause task's cgroup once the task is gone: runc does it,
// unless a crash cut it short. A failure is logged, not returned: a cgroup that cannot
// go must not make the pod impossible to stop.
func (m *Manager) removeCgroup(ctx context.Context, sb *Sandbox) {
	if err := cgroup.Remove(m.cgroupDir(sb)); err != nil {
		log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Warn("remove cgroup")
	}
}

// cgroupDir is the cgroup of sb's pause task.
func (m *Manager) cgroupDir(sb *Sandbox) string {
	return cgroup.Dir(sb.Config.GetLinux().GetCgroupParent(), sb.ID, m.opts.CgroupDriver, m.opts.Namespace)
}
