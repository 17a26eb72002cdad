package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// commCPU is where a phase's CPU went, by the name of the process (its comm when
// sampled): `perf record -a -e cpu-clock -c N` takes one sample for every N ns of CPU
// time on each CPU, so a name's samples times N is its CPU time, the kernel's part
// (samples at a kernel address) apart. The idle task (pid 0) is left out.
type commCPU struct {
	user, kernel map[string]int // samples by comm
	period       time.Duration
}

// parseCommSamples reads `perf script -F comm,pid,ip` output: "comm pid ip" per line;
// a comm may hold spaces, so the pid and address are taken from the line's end.
func parseCommSamples(out string, period time.Duration) (commCPU, error) {
	c := commCPU{user: map[string]int{}, kernel: map[string]int{}, period: period}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return c, fmt.Errorf("perf script line %q: want comm, pid and ip", line)
		}
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil {
			return c, fmt.Errorf("perf script line %q: pid: %v", line, err)
		}
		ip, err := strconv.ParseUint(f[len(f)-1], 16, 64)
		if err != nil {
			return c, fmt.Errorf("perf script line %q: ip: %v", line, err)
		}
		if pid == 0 {
			continue
		}
		comm := strings.Join(f[:len(f)-2], " ")
		if ip >= 1<<63 {
			c.kernel[comm]++
		} else {
			c.user[comm]++
		}
	}
	return c, nil
}

// lines prints, per pod, the CPU of each name with at least 1% of the total, the most
// first, then the rest and the total: "who: comm: T ms per pod (kernel K)".
func (c commCPU) lines(who string, pods int) string {
	per := func(samples int) float64 {
		return float64(time.Duration(samples)*c.period) / float64(time.Millisecond) / float64(pods)
	}
	all := map[string]int{} // samples by comm, user and kernel
	total, kernel := 0, 0
	for n, v := range c.user {
		all[n] += v
		total += v
	}
	for n, v := range c.kernel {
		all[n] += v
		total, kernel = total+v, kernel+v
	}
	sorted := slices.Collect(maps.Keys(all))
	slices.SortFunc(sorted, func(a, b string) int { return cmp.Or(cmp.Compare(all[b], all[a]), cmp.Compare(a, b)) })
	var out strings.Builder
	restAll, restKernel, restNames := 0, 0, 0
	for _, n := range sorted {
		if all[n]*100 < total {
			restAll, restKernel, restNames = restAll+all[n], restKernel+c.kernel[n], restNames+1
			continue
		}
		fmt.Fprintf(&out, "%s: %s: %.1f ms per pod (kernel %.1f)\n", who, n, per(all[n]), per(c.kernel[n]))
	}
	if restAll > 0 {
		fmt.Fprintf(&out, "%s: the rest (%d names): %.1f ms per pod (kernel %.1f)\n", who, restNames, per(restAll), per(restKernel))
	}
	fmt.Fprintf(&out, "%s: all but idle: %.1f ms per pod (kernel %.1f), %d samples of %v\n", who, per(total), per(kernel), total, c.period)
	return out.String()
}
