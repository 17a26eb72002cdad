package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runq is time on a CPU and time runnable in a run queue, waiting for one
// (/proc/PID/task/TID/schedstat).
type runq struct{ cpu, wait time.Duration }

// threadRunqs is runq for each thread of some processes, by thread id.
type threadRunqs map[int]runq

// since sums, over the threads alive now, what each used and waited since before:
// all of it for a thread that was not there before. A thread that exited in
// between is not counted (its time is gone with it), so the sum never goes below
// zero but can fall short for processes whose threads exit.
func (now threadRunqs) since(before threadRunqs) runq {
	var sum runq
	for tid, r := range now {
		b := before[tid]
		sum.cpu, sum.wait = sum.cpu+r.cpu-b.cpu, sum.wait+r.wait-b.wait
	}
	return sum
}

// runqOf reads each thread's runq of the processes in pids.
func runqOf(pids ...int) (threadRunqs, error) {
	out := threadRunqs{}
	for _, pid := range pids {
		dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		if err != nil {
			return nil, err
		}
		if len(dirs) == 0 {
			return nil, fmt.Errorf("no process %d", pid)
		}
		for _, d := range dirs {
			tid, err := strconv.Atoi(filepath.Base(d))
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, "schedstat"))
			if err != nil {
				continue // the thread exited
			}
			r, err := parseSchedstat(string(b))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d, err)
			}
			out[tid] = r
		}
	}
	return out, nil
}

// parseSchedstat reads a task's schedstat: "on-CPU ns, run-queue wait ns, slices".
func parseSchedstat(s string) (runq, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return runq{}, fmt.Errorf("schedstat %q: want 3 fields", s)
	}
	cpu, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return runq{}, err
	}
	wait, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return runq{}, err
	}
	return runq{time.Duration(cpu), time.Duration(wait)}, nil
}
