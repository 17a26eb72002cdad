// Package cgroup finds and removes the cgroups of tasks.
//
// runc makes a task's cgroup in every hierarchy and removes it when
// the task is deleted. A runc killed half way (its caller went away, containerd died)
// leaves it behind, empty: the undo and removal paths and recovery remove such
// leftovers. Only empty cgroups can be removed (rmdir): Remove never touches a live
// task's cgroup, and Clear, for a task containerd no longer has, kills what is left
// in it first.
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

// errBusy is Remove's error for a cgroup that still holds processes.
var errBusy = errors.New("still has processes or children")

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
				err = fmt.Errorf("cgroup %s %w", p, errBusy)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clearWait bounds how long Clear waits for the processes it killed to go.
const clearWait = 2 * time.Second

// Clear removes the cgroup dir like Remove, after killing (SIGKILL) the processes
// still in it and waiting for them to go. It is for the cgroup of a task that
// containerd has deleted or never recorded: a process left there is one nobody will
// stop, such as the runc init of a create that finished after containerd gave up on
// it. The kill is logged; killed is how many processes it signalled.
func Clear(ctx context.Context, dir string) (killed int, err error) {
	if err = Remove(dir); err == nil || !errors.Is(err, errBusy) {
		return 0, err
	}
	for _, pid := range procs(dir) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed > 0 {
		log.G(ctx).WithField("cgroup", dir).WithField("processes", killed).Warn("killed processes left in the cgroup of a task containerd does not have")
	}
	for end := time.Now().Add(clearWait); ; time.Sleep(20 * time.Millisecond) {
		if err = Remove(dir); err == nil || time.Now().After(end) {
			return killed, err
		}
	}
}

// procs lists the processes in the cgroup dir, in any hierarchy.
func procs(dir string) []int {
	seen := map[int]bool{}
	var out []int
	for _, mnt := range mounts() {
		data, err := os.ReadFile(filepath.Join(mnt, filepath.Clean("/"+dir), "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// Mounts lists the mount points of every cgroup hierarchy, read once.
func Mounts() []string { return mounts() }
