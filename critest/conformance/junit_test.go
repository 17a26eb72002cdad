package conformance

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadJUnit(t *testing.T) {
	for _, tc := range []struct {
		name, xml string
		want      JUnit
	}{
		{"testsuites", `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="100" errors="0" failures="1">
  <testsuite name="Kubernetes e2e suite" tests="5" skipped="1" failures="1">
    <testcase name="[ReportBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
    <testcase name="[sig-node] Pods should be updated [NodeConformance]" status="passed"></testcase>
    <testcase name="[sig-node] Sysctls should work [NodeConformance]" status="failed"><failure message="boom" type="failed">x</failure></testcase>
    <testcase name="[sig-node] Probing should restart [NodeConformance]" status="skipped"><skipped message="skipped - only on gce"></skipped></testcase>
    <testcase name="[SynchronizedAfterSuite]" status="error"><error message="panic"></error></testcase>
  </testsuite>
</testsuites>`, JUnit{Tests: 5, Failures: 1, Errors: 1, Skipped: 1,
			Failed:       []string{"[SynchronizedAfterSuite]", "[sig-node] Sysctls should work [NodeConformance]"},
			SkippedTests: []string{"[sig-node] Probing should restart [NodeConformance]: skipped - only on gce"}}},
		{"one suite", `<testsuite><testcase name="a"></testcase><testcase name="b"></testcase></testsuite>`, JUnit{Tests: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "junit_01.xml")
			require.NoError(t, os.WriteFile(p, []byte(tc.xml), 0o644))
			j, err := ReadJUnit(p)
			require.NoError(t, err)
			require.Equal(t, tc.want, j)
		})
	}
	p := filepath.Join(t.TempDir(), "bad.xml")
	require.NoError(t, os.WriteFile(p, []byte("<testsuites><testsuite>"), 0o644))
	_, err := ReadJUnit(p)
	require.Error(t, err)
	_, err = ReadJUnit(filepath.Join(t.TempDir(), "missing.xml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
