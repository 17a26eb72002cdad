package conformance

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is ginkgo's end-of-suite report, as critest prints it.
type Summary struct {
	// Line is the two summary lines joined: "Ran 5 of 122 Specs in 12.3
	// seconds; SUCCESS! -- 5 Passed | 0 Failed | 0 Pending | 117 Skipped".
	Line                                     string
	Ran, Total                               int
	Passed, Failed, Flaked, Pending, Skipped int
	Duration                                 time.Duration
	Succeeded                                bool
	// Failures are the entries of "Summarizing N Failures:", one string per
	// spec: heading, spec text and location.
	Failures []string
	// RuntimeSkips counts the reasons of specs that skipped themselves
	// while running ("[SKIPPED] AppArmor is disabled on this host"), as
	// opposed to those the focus or skip expressions filtered out.
	RuntimeSkips map[string]int
	// Messages are the failure messages of the failed specs ("[FAILED] failed to
	// start container: rpc error: ..." and the lines of its assertion, up to
	// "In [It] at: ..."), in the order critest printed them: what went wrong,
	// where Failures only say which spec and where.
	Messages []string
}

var (
	ansiRE    = regexp.MustCompile("\x1b\\[[0-9;]*m")
	ranRE     = regexp.MustCompile(`Ran (\d+) of (\d+) Specs in ([0-9.]+) seconds`)
	countsRE  = regexp.MustCompile(`(SUCCESS!|FAIL!)[^\n]*?-- (\d+) Passed \| (\d+) Failed \|(?: (\d+) Flaked \|)?(?: \d+ Repeated \|)? (\d+) Pending \| (\d+) Skipped`)
	summaryRE = regexp.MustCompile(`^Summarizing (\d+) Failures?:`)
	skipRE    = regexp.MustCompile(`^\s*\[SKIPPED\] (.+)$`)
	failedRE  = regexp.MustCompile(`^\s*\[(FAILED|PANICKED!|TIMEDOUT|INTERRUPTED|ABORTED)\] `)
	failRE    = regexp.MustCompile(`^\s*\[(FAIL|PANICKED!|ABORTED|TIMEDOUT|INTERRUPTED)\] `)
)

// ParseSummary finds the last ginkgo summary in critest's output. ok is
// false when there is none (critest died before ginkgo reported).
func ParseSummary(out string) (s Summary, ok bool) {
	out = ansiRE.ReplaceAllString(out, "")
	ran := ranRE.FindAllStringSubmatchIndex(out, -1)
	if len(ran) == 0 {
		return Summary{}, false
	}
	last := ran[len(ran)-1]
	m := ranRE.FindStringSubmatch(out[last[0]:last[1]])
	s.Ran, _ = strconv.Atoi(m[1])
	s.Total, _ = strconv.Atoi(m[2])
	secs, _ := strconv.ParseFloat(m[3], 64)
	s.Duration = time.Duration(secs * float64(time.Second)).Round(time.Millisecond)
	rest := out[last[1]:]
	c := countsRE.FindStringSubmatch(rest)
	if c == nil {
		return Summary{}, false
	}
	s.Succeeded = c[1] == "SUCCESS!"
	s.Passed, _ = strconv.Atoi(c[2])
	s.Failed, _ = strconv.Atoi(c[3])
	s.Flaked, _ = strconv.Atoi(c[4])
	s.Pending, _ = strconv.Atoi(c[5])
	s.Skipped, _ = strconv.Atoi(c[6])
	s.Line = strings.TrimSpace(out[last[0]:last[1]]) + "; " + strings.TrimSpace(c[0])
	s.Failures = failures(out[:last[0]])
	s.RuntimeSkips = runtimeSkips(out)
	s.Messages = failureMessages(out[:last[0]])
	return s, true
}

// maxMessageLines bounds one failure message (an assertion may print a whole
// object).
const maxMessageLines = 12

// failureMessages reads ginkgo's failure messages: a line "[FAILED] <message>"
// (not "[FAILED] in [It] - file:line", the timeline's marker of where, nor the
// spec's "• [FAILED] [n seconds]" heading) and the lines after it up to
// "In [It] at: file:line" or a blank line, before the "Summarizing" block.
func failureMessages(out string) []string {
	var msgs []string
	var cur []string
	in := false
	flush := func() {
		if len(cur) > 0 {
			msgs = append(msgs, strings.Join(cur, "\n"))
		}
		cur, in = nil, false
	}
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if summaryRE.MatchString(t) {
			break // the summary's "[FAIL]"/"[TIMEDOUT]" entries name specs
		}
		switch {
		case failedRE.MatchString(l) && !strings.HasPrefix(t[strings.Index(t, "] ")+2:], "in ["):
			flush()
			cur, in = []string{t}, true
		case !in:
		case t == "" || strings.HasPrefix(t, "In ["):
			flush()
		case len(cur) < maxMessageLines:
			cur = append(cur, "  "+t)
		}
	}
	flush()
	return msgs
}

// failures reads the last "Summarizing N Failures:" block: each entry
// starts with "[FAIL]" (or PANICKED!, ABORTED, ...) and runs until the next
// entry or a blank line.
func failures(out string) []string {
	lines := strings.Split(out, "\n")
	start := -1
	for i := len(lines) - 1; i >= 0; i-- {
		if summaryRE.MatchString(strings.TrimSpace(lines[i])) {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil
	}
	var out2 []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out2 = append(out2, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, l := range lines[start:] {
		t := strings.TrimSpace(l)
		switch {
		case failRE.MatchString(l):
			flush()
			cur = append(cur, t)
		case t == "" && (len(cur) > 0 || len(out2) > 0):
			flush()
			return out2
		case len(cur) > 0:
			cur = append(cur, "  "+t)
		}
	}
	flush()
	return out2
}

// FailedSpecs are the texts of the failed specs (each failure's first line without
// its "[FAIL] " marker), sorted.
func (s Summary) FailedSpecs() []string {
	out := make([]string, 0, len(s.Failures))
	for _, f := range s.Failures {
		first, _, _ := strings.Cut(f, "\n")
		if i := strings.Index(first, "] "); i >= 0 && strings.HasPrefix(first, "[") {
			first = first[i+2:]
		}
		out = append(out, first)
	}
	sort.Strings(out)
	return out
}

func runtimeSkips(out string) map[string]int {
	m := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		// "[SKIPPED] in [It] - file:line @ time" is where, not why.
		if s := skipRE.FindStringSubmatch(l); s != nil && !strings.HasPrefix(s[1], "in [") {
			m[strings.TrimSpace(s[1])]++
		}
	}
	return m
}

// String is Line plus the runtime skip reasons, sorted.
func (s Summary) String() string {
	var b strings.Builder
	b.WriteString(s.Line)
	reasons := make([]string, 0, len(s.RuntimeSkips))
	for r := range s.RuntimeSkips {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(&b, "\n  skipped while running (%d): %s", s.RuntimeSkips[r], r)
	}
	return b.String()
}
