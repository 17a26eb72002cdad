package harness

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A long failed integration test prints hundreds of log lines after its failure
// (every daemon's log tail), and CI often shows only the end of the output. So the
// harness repeats what failed at the very end: the first harness call of a test
// registers the summary's cleanup, which therefore runs after every other one, and
// Errorf and Fatalf (and the leak check) add to it. A subtest's failures go to its
// top-level test's summary.

type summary struct {
	mu    sync.Mutex
	lines []string
	logs  map[string]string // daemon -> log path, whose notable lines are shown too
}

var summaries sync.Map // top-level test name -> *summary

func rootName(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

// summaryOf returns the summary of t's top-level test, made (with its cleanup on t)
// by the first call.
func summaryOf(t testing.TB) *summary {
	s := &summary{}
	v, loaded := summaries.LoadOrStore(rootName(t), s)
	if loaded {
		return v.(*summary)
	}
	t.Cleanup(func() {
		summaries.CompareAndDelete(rootName(t), s)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, name := range slices.Sorted(maps.Keys(s.logs)) {
			if lines := notableLines(s.logs[name], 30); lines != "" {
				fmt.Fprintf(&b, "%s's last notable log lines (warnings, errors, restarts, recovery and sweeps; %s):\n%s\n", name, s.logs[name], lines)
			}
		}
		if len(s.lines) > 0 {
			fmt.Fprintf(&b, "what failed:\n%s", strings.Join(s.lines, "\n"))
		}
		if b.Len() > 0 {
			t.Logf("harness: the end of %s (the details are above):\n%s", rootName(t), b.String())
		}
	})
	return s
}

func (s *summary) add(t testing.TB, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, "- "+t.Name()+": "+strings.ReplaceAll(msg, "\n", "\n    "))
}

// showLog names a daemon log whose notable lines the summary shows when t fails.
func showLog(t testing.TB, name, path string) {
	s := summaryOf(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = map[string]string{}
	}
	s.logs[name] = path
}

// notable is what notableLines keeps of a daemon's log; noise are failed RPCs the
// kubelet makes all the time (a status of a container it just removed).
var (
	notable = regexp.MustCompile(`level=(error|warning|fatal|panic)|===== harness:|orphan|removing|undo|recovery done|sweep|stopped`)
	noise   = regexp.MustCompile(`msg=failed .*code = NotFound`)
)

// notableLines returns the last n notable lines of the log at path.
func notableLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if notable.MatchString(l) && !noise.MatchString(l) {
			keep = append(keep, "    "+l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

// Errorf is t.Errorf, with the message repeated at the end of the test's output.
func Errorf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	summaryOf(t).add(t, msg)
	t.Error(msg)
}

// Fatalf is t.Fatalf, with the message repeated at the end of the test's output.
func Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	summaryOf(t).add(t, msg)
	t.Fatal(msg)
}

var longID = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// logLinesAbout returns, for each 64-hex id in leaks (a container, sandbox or
// snapshot id), the last n lines of the log at path that mention it: what the
// daemon last did with the thing that leaked.
func logLinesAbout(path string, leaks []string, n int) string {
	ids := map[string]bool{}
	var order []string
	for _, l := range leaks {
		for _, id := range longID.FindAllString(l, -1) {
			if !ids[id] {
				ids[id] = true
				order = append(order, id)
			}
		}
	}
	if len(order) == 0 || path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(b), "\n")
	var out strings.Builder
	for _, id := range order {
		var hits []string
		for _, l := range lines {
			if strings.Contains(l, id) {
				hits = append(hits, l)
			}
		}
		total := len(hits)
		if total > n {
			hits = hits[total-n:]
		}
		fmt.Fprintf(&out, "%d lines of %s name %s; the last %d:\n", total, path, id, len(hits))
		for _, h := range hits {
			out.WriteString("    " + h + "\n")
		}
	}
	return out.String()
}
