// Command testsum reads `go test -json` and prints what plain `go test` prints (the
// output of failed tests and each package's ok/FAIL line), so that CI logs keep their
// usual summary lines, each followed by a "testsum: slow:" line naming the package's
// top-level tests that took a minute or more (where CI's time goes); it also records
// every skipped test with its reason, and at the end of a run reports the skips by
// reason and fails on any that is not expected on this host class.
//
//	go test -json ./... | testsum [-v] [-skips FILE]
//	    filter; -v prints every line as `go test -v` would; each skip is appended to
//	    FILE as a JSON line; the exit status is 1 when a test, a package or a build
//	    failed (or the input holds no result at all).
//	testsum -report -expected LIST FILE...
//	    the skips of the FILEs, counted by reason; exit status 1 when one of them
//	    matches no line of LIST (hack/ci-skips.txt), a test that must run here.
//
// LIST has one line per test allowed to skip: a package path relative to the module
// (or "*"), a test name pattern (path.Match, "/" separates subtests), and after "#"
// why it may skip. A skipped test is expected when a line matches it.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "print every output line, as go test -v")
	skips := flag.String("skips", "", "append each skipped test to this file (JSON lines)")
	report := flag.Bool("report", false, "report the skips recorded in the files given as arguments")
	expected := flag.String("expected", "", "with -report: the list of tests allowed to skip")
	flag.Parse()
	if *report {
		os.Exit(runReport(os.Stdout, *expected, flag.Args()))
	}
	var rec io.Writer
	if *skips != "" {
		f, err := os.OpenFile(*skips, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
		defer f.Close()
		rec = f
	}
	res, err := filter(os.Stdin, os.Stdout, rec, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if res.failed || res.packages == 0 {
		if res.packages == 0 {
			fmt.Println("testsum: no package result in go test's output")
		}
		os.Exit(1)
	}
}

// event is one line of `go test -json` (test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or package's pass or fail
}

// slowTest is how long a test must take to be named on its package's slow line.
const slowTest = 60.0

// slowLine is the line after a package's result that names its top-level tests of
// slowTest seconds or more, slowest first; "" when there are none.
func slowLine(pkg string, tests map[string]float64) string {
	names := make([]string, 0, len(tests))
	for n := range tests {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if tests[a] != tests[b] {
			if tests[a] > tests[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0fs", n, tests[n]))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("testsum: slow: %s: %s\n", pkg, strings.Join(parts, ", "))
}

// Skip is a skipped test as recorded.
type Skip struct {
	Package string `json:"package"`
	Test    string `json:"test"`
	Reason  string `json:"reason"`
}

type result struct {
	failed   bool
	packages int // packages that reported a result
	skips    []Skip
}

// logLine is a t.Log/t.Skip line as the testing package indents it: "    file.go:12: msg".
var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)

func filter(in io.Reader, out, rec io.Writer, verbose bool) (result, error) {
	var res result
	buf := map[string][]string{}            // package + "\x00" + test -> its output lines
	var order []string                      // buf's keys, first output first
	slow := map[string]map[string]float64{} // package -> its slow top-level tests
	noteSlow := func(e event) {
		if e.Test == "" || strings.Contains(e.Test, "/") || e.Elapsed < slowTest {
			return
		}
		if slow[e.Package] == nil {
			slow[e.Package] = map[string]float64{}
		}
		slow[e.Package][e.Test] = e.Elapsed
	}
	// The package's line, after its ok/FAIL line.
	endPackage := func(pkg string) {
		fmt.Fprint(out, slowLine(pkg, slow[pkg]))
		delete(slow, pkg)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, string(line)) // not JSON: go's own message, pass it on
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			if verbose {
				fmt.Fprint(out, e.Output)
			} else if e.Test == "" {
				// The package's own lines: its ok/FAIL line and what failed tests left
				// (go test drops the binary's bare PASS line when not verbose).
				if e.Output != "PASS\n" {
					fmt.Fprint(out, e.Output)
				}
			} else {
				if _, ok := buf[key]; !ok {
					order = append(order, key)
				}
				buf[key] = append(buf[key], e.Output)
			}
		case "fail", "build-fail":
			noteSlow(e)
			if e.Test == "" {
				res.failed = true
				if e.Action == "fail" {
					res.packages++
				}
				if !verbose {
					// Tests that never ended (a panic, the timeout): all they said.
					for _, k := range order {
						if p, _, _ := strings.Cut(k, "\x00"); p == e.Package && buf[k] != nil {
							fmt.Fprint(out, strings.Join(buf[k], ""))
							delete(buf, k)
						}
					}
				}
				endPackage(e.Package)
			} else if !verbose {
				fmt.Fprint(out, strings.Join(buf[key], ""))
			}
			delete(buf, key)
		case "pass":
			noteSlow(e)
			if e.Test == "" {
				res.packages++
				endPackage(e.Package)
			}
			delete(buf, key)
		case "skip":
			if e.Test == "" {
				res.packages++ // [no test files]
				break
			}
			s := Skip{Package: e.Package, Test: e.Test, Reason: skipReason(buf[key])}
			res.skips = append(res.skips, s)
			if rec != nil {
				b, _ := json.Marshal(s)
				if _, err := rec.Write(append(b, '\n')); err != nil {
					return res, err
				}
			}
			delete(buf, key)
		}
	}
	return res, sc.Err()
}

// skipReason is the message of the last log line before the test's "--- SKIP" line:
// t.Skip's argument, its first line.
func skipReason(lines []string) string {
	reason := "(no reason given)"
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--- SKIP") {
			break
		}
		if m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			reason = m[1]
		}
	}
	return reason
}

// allowed is one line of the expected-skips list.
type allowed struct {
	pkg, test, why string
}

func readAllowed(file string) ([]allowed, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []allowed
	for i, l := range strings.Split(string(data), "\n") {
		body, why, _ := strings.Cut(l, "#")
		f := strings.Fields(body)
		switch {
		case len(f) == 0:
			continue
		case len(f) != 2 || strings.TrimSpace(why) == "":
			return nil, fmt.Errorf("%s:%d: want \"PACKAGE TEST # why\", got %q", file, i+1, l)
		}
		if _, err := path.Match(f[1], ""); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, i+1, err)
		}
		out = append(out, allowed{pkg: f[0], test: f[1], why: strings.TrimSpace(why)})
	}
	return out, nil
}

// expected: a line of the list matches the skip. Packages are matched by their path
// relative to the module ("critest/e2e" matches ".../shimd/critest/e2e").
func expected(list []allowed, s Skip) bool {
	return slices.ContainsFunc(list, func(a allowed) bool {
		pkgOK := a.pkg == "*" || s.Package == a.pkg || strings.HasSuffix(s.Package, "/"+a.pkg)
		ok, _ := path.Match(a.test, s.Test)
		return pkgOK && ok
	})
}

func runReport(out io.Writer, list string, files []string) int {
	var allow []allowed
	if list != "" {
		var err error
		if allow, err = readAllowed(list); err != nil {
			fmt.Fprintln(out, "testsum:", err)
			return 2
		}
	}
	var skips []Skip
	for _, f := range files {
		s, err := readSkips(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(out, "testsum:", err)
			return 2
		}
		skips = append(skips, s...)
	}
	byReason := map[string]int{}
	var unexpected []string
	for _, s := range skips {
		byReason[s.Reason]++
		if list != "" && !expected(allow, s) {
			unexpected = append(unexpected, fmt.Sprintf("  %s %s: %s", s.Package, s.Test, s.Reason))
		}
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if byReason[a] != byReason[b] {
			return byReason[b] - byReason[a]
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(out, "skipped tests: %d\n", len(skips))
	for _, r := range reasons {
		fmt.Fprintf(out, "%6d  %s\n", byReason[r], r)
	}
	if len(unexpected) > 0 {
		slices.Sort(unexpected)
		fmt.Fprintf(out, "FAIL: %d skipped tests must run on this host class (not in %s):\n%s\n", len(unexpected), list, strings.Join(unexpected, "\n"))
		return 1
	}
	return 0
}

func readSkips(file string) ([]Skip, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Skip
	dec := json.NewDecoder(f)
	for {
		var s Skip
		if err := dec.Decode(&s); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, s)
	}
}
