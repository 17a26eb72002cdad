package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat and of
// /proc/stat's CPU lines (100 on Linux).
const clockTicks = 100

// machineBusy is the busy time of all CPUs since boot.
func machineBusy() (time.Duration, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(string(raw))
}

// parseMachineBusy reads the "cpu" line of /proc/stat: user nice system idle iowait
// irq softirq steal (guest and guest_nice are inside user and nice), in USER_HZ.
func parseMachineBusy(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	var busy int64
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
