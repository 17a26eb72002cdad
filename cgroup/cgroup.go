// Package cgroup finds and removes the cgroups of tasks.
//
// runc makes a task's cgroup in every hierarchy and removes it when
// the task is deleted. A runc killed half way (its caller went away, containerd died)
// leaves it behind, empty: the undo and removal paths and recovery remove such
// leftovers. Only empty cgroups can be removed (rmdir), so a live task's cgroup is
// never touched.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/containerd/log"
	"github.com/moby/sys/mountinfo"

	"github.com/shimd/shimd/pod"
)

// Dir is the cgroupfs path of a task's cgroup: <parent>/<id>, or containerd's
// default /<namespace>/<id> without a parent. With the systemd driver it is "":
// systemd removes a scope itself.
func Dir(parent, id, driver, namespace string) string {
	switch {
	case driver == "systemd":
		return ""
	case parent == "":
		return path.Join("/", namespace, id)
	}
	return pod.CgroupPath(parent, id, driver)
}

// mounts lists the mount points of every cgroup hierarchy, read once.
var mounts = sync.OnceValue(func() []string {
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

// Remove removes the cgroup dir (see Dir) from every hierarchy where it
// exists and is empty. One that still holds processes is an error.
func Remove(dir string) error {
	if dir == "" || dir == "/" {
		return nil
	}
	var errs []error
	for _, mnt := range mounts() {
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

// Mounts lists the mount points of every cgroup hierarchy, read once.
func Mounts() []string { return mounts() }
