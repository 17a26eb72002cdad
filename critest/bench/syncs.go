package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// syncEvents are the syscalls that end a durable write: bbolt commits a write
// transaction with an fdatasync of its file (containerd's meta.db and the overlay
// snapshotter's metadata.db), shimd's status records and containerd's content
// writes with an fsync.
var syncEvents = []string{"syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync"}

// syncCounts are the fdatasync and fsync calls of one process over a window.
type syncCounts struct {
	fdatasync, fsync int64
}

// parseSyncCounts reads the counts that `perf stat -x, -e <syncEvents>` writes: one
// line per event, "<count>,<unit>,<event>,..."; "<not counted>" reads as 0.
func parseSyncCounts(out string) (syncCounts, error) {
	var c syncCounts
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 {
			continue
		}
		var dst *int64
		switch f[2] {
		case syncEvents[0]:
			dst = &c.fdatasync
		case syncEvents[1]:
			dst = &c.fsync
		default:
			continue
		}
		seen++
		if strings.HasPrefix(f[0], "<not") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return c, fmt.Errorf("perf stat count %q of %s: %w", f[0], f[2], err)
		}
		*dst = n
	}
	if seen != len(syncEvents) {
		return c, fmt.Errorf("perf stat: %d of the %d events in its output:\n%s", seen, len(syncEvents), out)
	}
	return c, nil
}

// line prints the counts per pod.
func (c syncCounts) line(who string, pods int) string {
	return fmt.Sprintf("%s: %d fdatasync (%.1f per pod), %d fsync (%.1f per pod)", who,
		c.fdatasync, float64(c.fdatasync)/float64(pods), c.fsync, float64(c.fsync)/float64(pods))
}
