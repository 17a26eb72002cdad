package stats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
)

// Direct reads: the stats lists read a runc task's cgroup files themselves, rather
// than asking containerd for every task's metrics (containerd then asks each shim in
// turn, and each shim reads every file of every controller). Only the files the CRI
// stats use are read, into the fields of containerd's own metrics types that
// sampleOf converts, so both paths give the same figures:
//
//	v1: cpuacct.usage; memory.usage_in_bytes, memory.limit_in_bytes, memory.stat
//	    (total_inactive_file, total_rss, total_pgfault, total_pgmajfault),
//	    memory.memsw.usage_in_bytes and memory.memsw.limit_in_bytes where swap is
//	    accounted; pids.current
//	v2: cpu.stat (usage_usec); memory.current, memory.max, memory.stat (inactive_file, anon,
//	    pgfault, pgmajfault), memory.swap.current and memory.swap.max where swap is
//	    accounted; pids.current; cpu, memory and io pressure
//
// A task's groups come from /proc/<pid>/cgroup, kept per task id and pid (runc never
// moves a container's init process). Tasks of other runtimes (gVisor's cgroups are
// the sandbox's, not the container's), and any task whose files cannot be read, go
// through containerd as before.

// cgroupDirs are the directories of one task's cgroups.
type cgroupDirs struct {
	pid uint32
	// cpuacct, memory and pids are the v1 groups (empty on a v2 host).
	cpuacct, memory, pids string
	// unified is the v2 group on a v2 host.
	unified string
	// group is the task's own cgroup2 group (hostFS.ownGroup): its pressure on a
	// hybrid host; "" when it has none.
	group string
}

// groupCache keeps each task's cgroupDirs by task id.
type groupCache struct {
	mu   sync.Mutex
	byID map[string]cgroupDirs
}

func (g *groupCache) forget(id string) {
	g.mu.Lock()
	delete(g.byID, id)
	g.mu.Unlock()
}

// errNoDirect: the task's cgroups cannot be read directly; ask containerd.
var errNoDirect = errors.New("no direct cgroup read")

// dirsOf finds task id's cgroup directories from its process pid.
func (s *Collector) dirsOf(id string, pid uint32) (cgroupDirs, error) {
	s.groups.mu.Lock()
	d, ok := s.groups.byID[id]
	s.groups.mu.Unlock()
	if ok && d.pid == pid {
		return d, nil
	}
	data, err := os.ReadFile(filepath.Join(s.host.proc, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return cgroupDirs{}, fmt.Errorf("%w: %v", errNoDirect, err)
	}
	d, err = s.host.taskDirs(data)
	if err != nil {
		return cgroupDirs{}, err
	}
	d.pid, d.group = pid, s.host.ownGroupOf(data)
	s.groups.mu.Lock()
	if s.groups.byID == nil {
		s.groups.byID = map[string]cgroupDirs{}
	}
	s.groups.byID[id] = d
	s.groups.mu.Unlock()
	return d, nil
}

// taskDirs maps the paths of /proc/<pid>/cgroup onto the host's cgroup mounts.
func (h hostFS) taskDirs(procCgroup []byte) (cgroupDirs, error) {
	unified, byCtrl := parseProcCgroup(procCgroup)
	if h.unifiedOnly {
		if unified == "" || h.cgroup2 == "" {
			return cgroupDirs{}, fmt.Errorf("%w: no cgroup2 group", errNoDirect)
		}
		return cgroupDirs{unified: filepath.Join(h.cgroup2, unified)}, nil
	}
	var d cgroupDirs
	for ctrl, dst := range map[string]*string{"cpuacct": &d.cpuacct, "memory": &d.memory, "pids": &d.pids} {
		m, ok := h.v1[ctrl]
		p, in := byCtrl[ctrl]
		if !ok || !in {
			if ctrl == "pids" {
				continue // a kernel without the pids controller: no task count
			}
			return cgroupDirs{}, fmt.Errorf("%w: no %s cgroup", errNoDirect, ctrl)
		}
		rel, ok := strings.CutPrefix(p, m.root)
		if !ok {
			return cgroupDirs{}, fmt.Errorf("%w: %s group %s outside the mount's root %s", errNoDirect, ctrl, p, m.root)
		}
		*dst = filepath.Join(m.point, rel)
	}
	return d, nil
}

// readDirect reads a task's cgroup files into containerd's metrics type of the host's
// cgroup version.
func readDirect(d cgroupDirs) (any, time.Time, error) {
	at := time.Now()
	var r fileReader
	defer r.release()
	if d.unified != "" {
		m := &v2.Metrics{CPU: &v2.CPUStat{}, Memory: &v2.MemoryStat{}}
		r.keyed(d.unified, "cpu.stat", keyDst{"usage_usec", &m.CPU.UsageUsec})
		m.Memory.Usage = r.uint(d.unified, "memory.current")
		m.Memory.UsageLimit = r.uint(d.unified, "memory.max")
		r.keyed(d.unified, "memory.stat",
			keyDst{"inactive_file", &m.Memory.InactiveFile}, keyDst{"anon", &m.Memory.Anon},
			keyDst{"pgfault", &m.Memory.Pgfault}, keyDst{"pgmajfault", &m.Memory.Pgmajfault})
		if hasFile(d.unified, "memory.swap.current") {
			m.Memory.SwapUsage = r.uint(d.unified, "memory.swap.current")
			m.Memory.SwapLimit = r.uint(d.unified, "memory.swap.max")
		}
		if hasFile(d.unified, "pids.current") {
			m.Pids = &v2.PidsStat{Current: r.uint(d.unified, "pids.current")}
		}
		psi := readPSI(d.unified)
		m.CPU.PSI, m.Memory.PSI = psi.cpu, psi.memory
		if psi.io != nil {
			m.Io = &v2.IOStat{PSI: psi.io}
		}
		return m, at, r.err
	}
	m := &v1.Metrics{CPU: &v1.CPUStat{Usage: &v1.CPUUsage{}}, Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{}}}
	m.CPU.Usage.Total = r.uint(d.cpuacct, "cpuacct.usage")
	m.Memory.Usage.Usage = r.uint(d.memory, "memory.usage_in_bytes")
	m.Memory.Usage.Limit = r.uint(d.memory, "memory.limit_in_bytes")
	r.keyed(d.memory, "memory.stat",
		keyDst{"total_inactive_file", &m.Memory.TotalInactiveFile}, keyDst{"total_rss", &m.Memory.TotalRSS},
		keyDst{"total_pgfault", &m.Memory.TotalPgFault}, keyDst{"total_pgmajfault", &m.Memory.TotalPgMajFault})
	if hasFile(d.memory, "memory.memsw.usage_in_bytes") {
		m.Memory.Swap = &v1.MemoryEntry{Usage: r.uint(d.memory, "memory.memsw.usage_in_bytes"), Limit: r.uint(d.memory, "memory.memsw.limit_in_bytes")}
	}
	if d.pids != "" {
		m.Pids = &v1.PidsStat{Current: r.uint(d.pids, "pids.current")}
	}
	return m, at, r.err
}

// fileReader reads cgroup files into one pooled buffer (readbuf.go), keeping the
// first error. What read returns is good until the next read; release gives the
// buffer back.
type fileReader struct {
	err error
	buf *[]byte
}

func (r *fileReader) release() {
	if r.buf != nil {
		fileBufs.Put(r.buf)
		r.buf = nil
	}
}

func (r *fileReader) read(dir, name string) []byte {
	if r.err != nil {
		return nil
	}
	if r.buf == nil {
		r.buf = fileBufs.Get().(*[]byte)
	}
	data, err := readInto(filepath.Join(dir, name), *r.buf)
	if err != nil {
		r.err = fmt.Errorf("%w: %v", errNoDirect, err)
	}
	return data
}

// uint reads a file of one number; "max" is math.MaxUint64, as containerd reads it.
func (r *fileReader) uint(dir, name string) uint64 {
	data := bytes.TrimSpace(r.read(dir, name))
	if r.err != nil {
		return 0
	}
	if string(data) == "max" {
		return math.MaxUint64
	}
	v, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		r.err = fmt.Errorf("%w: %s/%s: %v", errNoDirect, dir, name, err)
	}
	return v
}

// keyDst is a key of a file of "key value" lines, and where its value goes.
type keyDst struct {
	key string
	dst *uint64
}

// keyed reads a file of "key value" lines into keys' destinations, and tells how
// many of keys it found with a number. A key it does not find keeps its value.
func (r *fileReader) keyed(dir, name string, keys ...keyDst) int {
	data := r.read(dir, name)
	found := 0
	for len(data) > 0 && found < len(keys) {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		k, v, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			continue
		}
		for _, kd := range keys {
			if string(k) != kd.key {
				continue
			}
			if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
				*kd.dst = n
				found++
			}
			break
		}
	}
	return found
}
