package stats

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/ctrd"
)

// What the metrics read of a container beside its cgroup's counters, the way
// cAdvisor (and containerd's CRI plugin after it) does:
//
//	container_file_descriptors  the entries of /proc/<pid>/fd of every process in
//	                            the container's cgroup
//	container_sockets           those of them that link to "socket:[inode]"
//	container_fs_limit_bytes,   statfs of the filesystem that holds the writable
//	container_fs_inodes_total,  layers (the snapshotter's root, the metrics' device
//	container_fs_inodes_free    label, as for container_fs_usage_bytes)
//	container_memory_kernel_usage  on cgroup v2, memory.stat's "kernel" (v1:
//	                            memory.kmem.usage_in_bytes, in containerd's metrics)

// containerPids lists the processes of a running container: a runc task's from its
// cgroup's cgroup.procs (the memory group on v1, the unified one on v2), any other
// task's (or one whose group cannot be read) as containerd lists them.
func (s *Collector) containerPids(ctx context.Context, c Container) ([]uint32, error) {
	if c.KernelCgroups && c.Pid != 0 {
		if d, err := s.dirsOf(c.ID, c.Pid); err == nil {
			dir := d.unified
			if dir == "" {
				dir = d.memory
			}
			if data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
				return parsePids(data)
			}
		}
	}
	_, task, err := ctrd.LoadTask(ctx, s.opts.Client, c.ID)
	if err != nil {
		return nil, err
	}
	ps, err := task.Pids(ctx)
	if err != nil {
		return nil, fmt.Errorf("processes of %s: %w", c.ID, err)
	}
	out := make([]uint32, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Pid)
	}
	return out, nil
}

// parsePids reads a cgroup.procs file: one pid a line.
func parsePids(data []byte) ([]uint32, error) {
	var out []uint32
	for _, f := range bytes.Fields(data) {
		pid, err := strconv.ParseUint(string(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("cgroup.procs: %q is not a pid", f)
		}
		out = append(out, uint32(pid))
	}
	return out, nil
}

// countFDs counts the open file descriptors of pids and, of those, the sockets,
// from proc (the host's /proc). A process that exited meanwhile, or whose fds
// cannot be read, counts nothing, as in cAdvisor.
func countFDs(proc string, pids []uint32) (fds, sockets uint64) {
	for _, pid := range pids {
		dir := filepath.Join(proc, strconv.FormatUint(uint64(pid), 10), "fd")
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		fds += uint64(len(entries))
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
				sockets++
			}
		}
	}
	return fds, sockets
}

// fsCapacity is the size and inodes of a filesystem.
type fsCapacity struct{ bytes, inodes, inodesFree uint64 }

// fsCapacityOf reads the capacity of the filesystem that holds dir.
func fsCapacityOf(dir string) (fsCapacity, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fsCapacity{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return capacityOf(st), nil
}

func capacityOf(st unix.Statfs_t) fsCapacity {
	return fsCapacity{bytes: st.Blocks * uint64(st.Bsize), inodes: st.Files, inodesFree: st.Ffree}
}

// kernelMemory reads the "kernel" line of a cgroup v2 group's memory.stat: nil
// without a group, or before Linux 5.18, which has no such line.
func kernelMemory(group string) *uint64 {
	if group == "" {
		return nil
	}
	var r fileReader
	defer r.release()
	var v uint64
	if r.keyed(group, "memory.stat", keyDst{"kernel", &v}) != 1 {
		return nil
	}
	return &v
}
