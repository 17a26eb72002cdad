package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run of two packages as go test -json writes it: a pass, a skip with a reason, a
// subtest skip, a failure, and a test that never ended (the package timed out).
const run = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"    a_test.go:9: chatter\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    a_test.go:12: a log line first\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    a_test.go:13: needs root\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestSkip"}
{"Action":"output","Package":"m/a","Test":"TestSub/one","Output":"    a_test.go:20: no runsc\n"}
{"Action":"output","Package":"m/a","Test":"TestSub/one","Output":"    --- SKIP: TestSub/one (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestSub/one"}
{"Action":"pass","Package":"m/a","Test":"TestSub"}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.01s\n"}
{"Action":"pass","Package":"m/a"}
{"Action":"output","Package":"m/b","Test":"TestBad","Output":"    b_test.go:5: boom\n"}
{"Action":"output","Package":"m/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestBad"}
{"Action":"output","Package":"m/b","Test":"TestHung","Output":"=== RUN   TestHung\n"}
{"Action":"output","Package":"m/b","Test":"TestHung","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t1.00s\n"}
{"Action":"fail","Package":"m/b"}
`

func TestFilter(t *testing.T) {
	var out, rec bytes.Buffer
	res, err := filter(strings.NewReader(run), &out, &rec, false)
	require.NoError(t, err)
	require.True(t, res.failed)
	require.Equal(t, 2, res.packages)
	require.Equal(t, "ok  \tm/a\t0.01s\n"+
		"    b_test.go:5: boom\n--- FAIL: TestBad (0.00s)\n"+
		"FAIL\tm/b\t1.00s\n", strings.Replace(out.String(), "=== RUN   TestHung\npanic: test timed out after 1s\n", "", 1))
	require.Contains(t, out.String(), "panic: test timed out after 1s\n", "a test that never ended is shown")
	require.Equal(t, []Skip{{"m/a", "TestSkip", "needs root"}, {"m/a", "TestSub/one", "no runsc"}}, res.skips)
	require.Equal(t, 2, strings.Count(rec.String(), "\n"))

	out.Reset()
	res, err = filter(strings.NewReader(run), &out, nil, true)
	require.NoError(t, err)
	require.Contains(t, out.String(), "    a_test.go:9: chatter\n", "-v prints everything")
}

func TestFilterPassesAndNoResult(t *testing.T) {
	pass := strings.Split(run, `{"Action":"output","Package":"m/b"`)[0]
	res, err := filter(strings.NewReader(pass), &bytes.Buffer{}, nil, false)
	require.NoError(t, err)
	require.False(t, res.failed)
	require.Equal(t, 1, res.packages)

	var out bytes.Buffer
	res, err = filter(strings.NewReader("# m/c\nc.go:1:1: syntax error\n"), &out, nil, false)
	require.NoError(t, err)
	require.Equal(t, 0, res.packages, "no result: main exits 1")
	require.Contains(t, out.String(), "syntax error", "lines that are not JSON are passed on")
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	skips := filepath.Join(dir, "skips.jsonl")
	var rec bytes.Buffer
	_, err := filter(strings.NewReader(run), &bytes.Buffer{}, &rec, false)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(skips, rec.Bytes(), 0o644))
	list := filepath.Join(dir, "ci-skips.txt")

	for _, tt := range []struct {
		name, list string
		code       int
		says       []string
	}{
		{"all expected", "# comment\na TestSkip # root is there\n* TestSub/* # no runsc in CI\n", 0, []string{"skipped tests: 2", "1  needs root", "1  no runsc"}},
		{"one must run", "m/a TestSkip # why\n", 1, []string{"FAIL: 1 skipped tests must run", "m/a TestSub/one: no runsc"}},
		{"other package", "x/a TestSkip # why\nm/a TestSub/one # why\n", 1, []string{"m/a TestSkip: needs root"}},
		{"a line without its reason", "m/a TestSkip\n", 2, []string{"want \"PACKAGE TEST # why\""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(list, []byte(tt.list), 0o644))
			var out bytes.Buffer
			require.Equal(t, tt.code, runReport(&out, list, []string{skips, filepath.Join(dir, "missing")}), out.String())
			for _, s := range tt.says {
				require.Contains(t, out.String(), s)
			}
		})
	}
}

// A package's top-level tests of a minute or more are named after its result line,
// slowest first; subtests and quicker tests are not.
func TestFilterNamesSlowTests(t *testing.T) {
	in := `{"Action":"pass","Package":"m/a","Test":"TestQuick","Elapsed":59.9}
{"Action":"pass","Package":"m/a","Test":"TestLong/sub","Elapsed":300}
{"Action":"pass","Package":"m/a","Test":"TestLong","Elapsed":301.2}
{"Action":"fail","Package":"m/a","Test":"TestSlowFail","Elapsed":75}
{"Action":"pass","Package":"m/a","Test":"TestAlsoLong","Elapsed":301.2}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t700.1s\n"}
{"Action":"fail","Package":"m/a","Elapsed":700.1}
{"Action":"pass","Package":"m/b","Test":"TestQuick","Elapsed":1}
{"Action":"output","Package":"m/b","Output":"ok  \tm/b\t1.0s\n"}
{"Action":"pass","Package":"m/b","Elapsed":1}
`
	var out bytes.Buffer
	_, err := filter(strings.NewReader(in), &out, nil, false)
	require.NoError(t, err)
	require.Equal(t, "FAIL\tm/a\t700.1s\n"+
		"testsum: slow: m/a: TestAlsoLong 301s, TestLong 301s, TestSlowFail 75s\n"+
		"ok  \tm/b\t1.0s\n", out.String())
}
