package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/containerd/log"
	"github.com/moby/sys/mountinfo"
)

// Cgroups of tasks. runc makes a task's cgroup in every hierarchy and removes it when
// the task is deleted. A runc killed half way (its caller went away, containerd died)
// leaves it behind, empty: the undo and removal paths and recovery remove such
// leftovers. Only empty cgroups can be removed (rmdir), so a live task's cgroup is
// never touched.

// CgroupDir is the cgroupfs path of a task's cgroup: <parent>/<id>, or containerd's
// default /<namespace>/<id> without a parent. With the systemd driver it is "":
// systemd removes a scope itself.
func CgroupDir(parent, id, driver, namespace string) string {
	switch {
	case driver == "systemd":
		return ""
	case parent == "":
		return path.Join("/", namespace, id)
	}
	return CgroupPath(parent, id, driver)
}

// cgroupMounts lists the mount points of every cgroup hierarchy, read once.
var cgroupMounts = sync.OnceValue(func() []string {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		log.L.WithError(err).Warn("list cgroup mounts")
		return nil
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
})

// RemoveCgroup removes the cgroup dir (see CgroupDir) from every hierarchy where it
// exists and is empty. One that still holds processes is an error.
func RemoveCgroup(dir string) error {
	if dir == "" || dir == "/" {
		return nil
	}
	var errs []error
	for _, mnt := range cgroupMounts() {
		p := filepath.Join(mnt, filepath.Clean("/"+dir))
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			if errors.Is(err, syscall.EBUSY) {
				err = fmt.Errorf("cgroup %s still has processes or children", p)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeOrphanCgroups removes the empty cgroups under /<namespace> whose id belongs to
// no task shimd knows: leftovers of a runc killed half way.
func (m *Manager) removeOrphanCgroups(ctx context.Context, known func(id string) bool) {
	if m.opts.CgroupDriver == "systemd" {
		return
	}
	for _, mnt := range cgroupMounts() {
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
	if err := RemoveCgroup(m.cgroupDir(sb)); err != nil {
		log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Warn("remove cgroup")
	}
}

// cgroupDir is the cgroup of sb's pause task.
func (m *Manager) cgroupDir(sb *Sandbox) string {
	return CgroupDir(sb.Config.GetLinux().GetCgroupParent(), sb.ID, m.opts.CgroupDriver, m.opts.Namespace)
}
