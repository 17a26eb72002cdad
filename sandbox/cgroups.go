package sandbox

import (
	"context"
	"os"
	"path/filepath"

	"github.com/containerd/log"

	"github.com/shimd/shimd/cgroup"
)

// podCgroups names and removes the cgroups of pods' pause tasks: runc makes them
// under the pod's cgroup parent, or under /<namespace> when the pod has none.
type podCgroups struct {
	driver    string // "systemd" or "cgroupfs"
	namespace string // containerd's namespace
}

// removeOrphans removes the empty cgroups under /<namespace> whose id belongs to no
// task shimd knows: leftovers of a runc killed half way.
func (c podCgroups) removeOrphans(ctx context.Context, known func(id string) bool) {
	if c.driver == "systemd" {
		return
	}
	for _, mnt := range cgroup.Mounts() {
		ents, _ := os.ReadDir(filepath.Join(mnt, c.namespace))
		for _, e := range ents {
			if !e.IsDir() || !isID(e.Name()) || known(e.Name()) {
				continue
			}
			if err := os.Remove(filepath.Join(mnt, c.namespace, e.Name())); err == nil {
				log.G(ctx).WithField("cgroup", filepath.Join(mnt, c.namespace, e.Name())).Info("removed orphaned cgroup")
			}
		}
	}
}

// remove removes the pause task's cgroup once containerd has no task for it: runc
// does it, unless a crash cut it short. A process still in it is killed first: one
// nobody will stop, such as the runc init of a pause task's create that finished
// after containerd gave up on it (containerd killed during RunPodSandbox). A failure
// is logged, not returned: a cgroup that cannot go must not make the pod impossible
// to stop.
func (c podCgroups) remove(ctx context.Context, sb *Sandbox) {
	if _, err := cgroup.Clear(ctx, c.dir(sb)); err != nil {
		log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Warn("remove cgroup")
	}
}

// dir is the cgroup of sb's pause task.
func (c podCgroups) dir(sb *Sandbox) string {
	return cgroup.Dir(sb.Config.GetLinux().GetCgroupParent(), sb.ID, c.driver, c.namespace)
}
