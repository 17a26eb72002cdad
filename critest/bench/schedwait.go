package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// schedWaits are, for one process, the scheduling delays that `perf sched timehist`
// reports: for each time one of its threads was switched in after a wakeup, how long
// it had been runnable without a CPU ("sch delay").
type schedWaits struct {
	delays []time.Duration
	run    time.Duration // the threads' time on a CPU over the window
}

// parseSchedTimehist reads `perf sched timehist` output (perf 6.1: "time cpu task
// [tid/pid] wait-time sch-delay run-time", times in ms) and returns the delays of
// the processes in pids, by pid. Switch-ins with no wakeup seen (sch delay 0) are
// kept: a thread preempted while running waits too, and timehist counts it there.
func parseSchedTimehist(out string, pids []int) (map[int]*schedWaits, error) {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	res := map[int]*schedWaits{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "[") {
			continue
		}
		// The task field is "name[tid/pid]", or "name[pid]" for a process's first
		// thread; a name may hold spaces, so take the ids from the field's end.
		task := strings.Join(f[2:len(f)-3], " ")
		open := strings.LastIndex(task, "[")
		if open < 0 || !strings.HasSuffix(task, "]") {
			continue // <idle>
		}
		ids := task[open+1 : len(task)-1]
		pid, err := strconv.Atoi(ids[strings.LastIndex(ids, "/")+1:])
		if err != nil || !want[pid] {
			continue
		}
		delay, err1 := strconv.ParseFloat(f[len(f)-2], 64)
		run, err2 := strconv.ParseFloat(f[len(f)-1], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("perf sched timehist line %q: times are not numbers", line)
		}
		w := res[pid]
		if w == nil {
			w = &schedWaits{}
			res[pid] = w
		}
		w.delays = append(w.delays, time.Duration(delay*float64(time.Millisecond)))
		w.run += time.Duration(run * float64(time.Millisecond))
	}
	return res, nil
}

// line prints one process's delays: how many switch-ins, their p50/p99 (or the max
// of fewer than 100), their sum, and the process's CPU time over the window.
func (w *schedWaits) line(who string) string {
	if w == nil || len(w.delays) == 0 {
		return fmt.Sprintf("%s: no switch-ins seen\n", who)
	}
	var sum time.Duration
	for _, d := range w.delays {
		sum += d
	}
	tail := fmt.Sprintf("p99 %.2f ms", ms(percentile(w.delays, 99)))
	if len(w.delays) < 100 {
		tail = fmt.Sprintf("max of %d %.2f ms", len(w.delays), ms(percentile(w.delays, 100)))
	}
	return fmt.Sprintf("%s: %d switch-ins, wait for a CPU p50 %.3f ms, %s, sum %.0f ms; on a CPU %.0f ms\n",
		who, len(w.delays), ms(percentile(w.delays, 50)), tail, ms(sum), ms(w.run))
}
