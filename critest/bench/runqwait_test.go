package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	r, err := parseSchedstat("1500000 250000 7\n")
	if err != nil || r != (runq{1500 * time.Microsecond, 250 * time.Microsecond}) {
		t.Errorf("got %+v, %v", r, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "1 y 3"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("%q read without error", bad)
		}
	}
}

// This test process has run, so it has CPU time; a pid that is not there is an error.
func TestRunqOf(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	r, err := runqOf(os.Getpid())
	if err != nil || len(r) == 0 || r.since(nil).cpu <= 0 {
		t.Errorf("runqOf(self) = %+v, %v", r, err)
	}
	if _, err := runqOf(1 << 30); err == nil {
		t.Error("runqOf of no process read without error")
	}
}

// A thread that exited drops out; one that is new counts whole; none goes negative.
func TestThreadRunqsSince(t *testing.T) {
	before := threadRunqs{1: {10, 5}, 2: {100, 50}}
	now := threadRunqs{1: {15, 7}, 3: {4, 1}}
	if got := now.since(before); got != (runq{9, 3}) {
		t.Errorf("since = %+v, want {9 3}", got)
	}
}
