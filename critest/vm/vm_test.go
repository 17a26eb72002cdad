package vm

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// QEMUThreads reads any process's threads; this test's own stand in for QEMU's.
func TestQEMUThreadsDescribesEachThread(t *testing.T) {
	v := &VM{pid: os.Getpid()}
	out := v.QEMUThreads()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	line := regexp.MustCompile(`^\d+ \S+\s+[RSDTtZXIP] ticks \d+\+\d+ wchan \S*$`)
	n := 0
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(l, "  ") {
			continue // a kernel stack line (root only)
		}
		if !line.MatchString(l) {
			t.Fatalf("line %q of:\n%s", l, out)
		}
		n++
	}
	// Threads may come and go between the two reads.
	if n == 0 || n > len(tasks)+8 {
		t.Fatalf("%d thread lines, %d threads:\n%s", n, len(tasks), out)
	}
	if got := (&VM{pid: 1 << 30}).QEMUThreads(); !strings.Contains(got, "no such file") {
		t.Fatalf("a missing process: %q", got)
	}
}
