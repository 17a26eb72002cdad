package runtime

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// cpuRange is an inclusive range of CPU or memory node numbers.
type cpuRange struct{ lo, hi int }

// maxCPUID bounds the numbers of a cpuset list (the kernel's NR_CPUS is at most 8192).
const maxCPUID = 1 << 16

// parseCPUSet parses a Linux cpuset list ("0-3,5,7-8"), as cpuset.cpus accepts it.
func parseCPUSet(s string) ([]cpuRange, error) {
	var out []cpuRange
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("range %q goes backwards", part)
			}
		}
		out = append(out, cpuRange{a, b})
	}
	return out, nil
}

func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= maxCPUID || strings.TrimSpace(s) != s || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%q is not a CPU or node number", s)
	}
	return n, nil
}

// cpuSetWithin tells whether every number of want is in have.
func cpuSetWithin(want, have []cpuRange) bool {
	sort.Slice(have, func(i, j int) bool { return have[i].lo < have[j].lo })
	for _, w := range want {
		for n := w.lo; n <= w.hi; {
			i := sort.Search(len(have), func(i int) bool { return have[i].hi >= n })
			if i == len(have) || have[i].lo > n {
				return false
			}
			n = have[i].hi + 1
		}
	}
	return true
}
