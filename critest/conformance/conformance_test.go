package conformance

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSkips(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Skip
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "comments and blanks", in: "# header\n\n   # indented comment\n", want: nil},
		{
			name: "entries",
			in:   "# x\nImage Manager public image with digest  # pinned upstream\n\\[k8s\\.io\\] Foo bar # reason two\n",
			want: []Skip{
				{Pattern: "Image Manager public image with digest", Reason: "pinned upstream", Line: 2},
				{Pattern: `\[k8s\.io\] Foo bar`, Reason: "reason two", Line: 3},
			},
		},
		{name: "no reason", in: "Foo bar\n", wantErr: `line 1: "Foo bar" has no "# reason" comment`},
		{name: "empty reason", in: "Foo bar #   \n", wantErr: "line 1: empty reason"},
		{name: "bad regexp", in: "Foo (bar # why\n", wantErr: "line 1: error parsing regexp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSkips(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestSkipFile checks the repository's skip list: it parses, its first entry
// is the upstream-digest image spec, and together the entries skip that spec
// and nothing that must run.
func TestSkipFile(t *testing.T) {
	skips, err := ReadSkipFile(filepath.Join("..", "skip"))
	require.NoError(t, err)
	require.NotEmpty(t, skips)
	require.Contains(t, skips[0].Reason, "upstream digest")
	re := regexp.MustCompile(SkipRegex(skips))
	for spec, skipped := range map[string]bool{
		"[k8s.io] Image Manager public image with digest should be pulled and removed [Conformance]":                                            true,
		"[k8s.io] Image Manager public image with tag should be pulled and removed [Conformance]":                                               false,
		"[k8s.io] Image Manager public image without tag should be pulled and removed [Conformance]":                                            false,
		"[k8s.io] Security Context UserNamespaces when Host idmap mount support is needed [It] runtime should support NamespaceMode_POD":        false,
		"[k8s.io] Streaming runtime should support streaming interfaces runtime should support exec with tty=true and stdin=true [Conformance]": false,
	} {
		require.Equal(t, skipped, re.MatchString(spec), spec)
	}
}

// TestNodeConformanceSkipFile checks critest/skip-node-conformance (make
// node-conformance): it parses, and it skips the privileged test and nothing else
// of these.
func TestNodeConformanceSkipFile(t *testing.T) {
	skips, err := ReadSkipFile(filepath.Join("..", "skip-node-conformance"))
	require.NoError(t, err)
	require.NotEmpty(t, skips)
	re := regexp.MustCompile(SkipRegex(skips))
	for test, skipped := range map[string]bool{
		"[sig-node] PrivilegedPod [NodeConformance] should enable privileged commands [LinuxOnly]":                                                                            true,
		"[sig-node] Pods should be updated [NodeConformance] [Conformance]":                                                                                                   false,
		"[sig-node] Security Context When creating a pod with privileged should run the container as privileged when true [LinuxOnly] [NodeFeature:HostAccess]":               false,
		"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop https hook properly [MinimumKubeletVersion:1.23] [NodeConformance]": false,
	} {
		require.Equal(t, skipped, re.MatchString(test), test)
	}
}

func TestSkipRegex(t *testing.T) {
	require.Equal(t, "", SkipRegex(nil))
	require.Equal(t, "(?:a|b)|(?:c)", SkipRegex([]Skip{{Pattern: "a|b"}, {Pattern: "c"}}))
}

func TestAllowedRuntimeSkip(t *testing.T) {
	require.True(t, AllowedRuntimeSkip("AppArmor is disabled on this host"))
	for _, r := range []string{
		"runtime does not implement recursive readonly mounts",
		"no runtime handler found which supports user namespaces",
		"The runtime does not support SupplementalGroupsPolicy feature",
		"ContainerStatus.image_id is empty; runtime does not seem to implement CRI API image_id correctly yet",
	} {
		require.False(t, AllowedRuntimeSkip(r), r)
	}
}

func TestSettingsFrom(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Settings
		wantErr string
	}{
		{name: "defaults", want: Settings{Parallel: 4, Runs: 1}},
		{name: "all set", env: map[string]string{"CRITEST_PARALLEL": "1", "CRITEST_RUNS": "3", "CRITEST_FOCUS": "Image Manager"},
			want: Settings{Parallel: 1, Runs: 3, Focus: "Image Manager"}},
		{name: "zero parallel", env: map[string]string{"CRITEST_PARALLEL": "0"}, wantErr: "CRITEST_PARALLEL"},
		{name: "junk runs", env: map[string]string{"CRITEST_RUNS": "three"}, wantErr: "CRITEST_RUNS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := settingsFrom(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestArgs(t *testing.T) {
	const ep = "unix:///tmp/x/shimd.sock"
	base := []string{"-config", "/tmp/x/crictl.yaml", "-runtime-endpoint", ep, "-image-endpoint", ep, "-ginkgo.no-color", "-ginkgo.v"}
	tests := []struct {
		name string
		s    Settings
		skip string
		want []string
	}{
		{name: "serial leaves -parallel out", s: Settings{Parallel: 1, Runs: 1}, want: base},
		{name: "parallel, skip, focus", s: Settings{Parallel: 4, Runs: 1, Focus: "Image Manager"}, skip: "(?:digest)",
			want: append(append([]string{}, base...), "-parallel=4", "-ginkgo.skip", "(?:digest)", "-ginkgo.focus", "Image Manager")},
		{name: "runtime handler", s: Settings{Parallel: 1, Runs: 1, Handler: "runsc"},
			want: append(append([]string{}, base...), "-runtime-handler", "runsc")},
		{name: "NRI socket", s: Settings{Parallel: 1, Runs: 1, NRISocket: "/tmp/x/nri.sock"},
			want: append(append([]string{}, base...), "-nri-socket", "/tmp/x/nri.sock")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Args(ep, "/tmp/x/crictl.yaml", tt.s, tt.skip))
		})
	}
}

// Output shaped like critest v1.36.0 (ginkgo v2.28.1, -ginkgo.v -ginkgo.no-color).
const failedRun = `critest version: v1.36.0
Running Suite: CRI validation - /tmp/x/cri-test1/critest-abc.test
Will run 116 of 122 specs
Running in parallel across 4 processes
S [SKIPPED] [0.012 seconds]
[k8s.io] AppArmor runtime should support apparmor [It] should fail with an unloaded apparmor_profile
  [SKIPPED] in [BeforeEach] - /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/apparmor_linux.go:80 @ 11/22/26 06:33:09.708
  [SKIPPED] AppArmor is disabled on this host
S [SKIPPED] [0.024 seconds]
  [SKIPPED] in [BeforeEach] - /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/security_context_linux.go:668 @ 11/22/26 06:33:40.256
  [SKIPPED] The runtime does not support SupplementalGroupsPolicy feature
• [FAILED] [3.057 seconds]

Summarizing 2 Failures:
  [FAIL] [k8s.io] Streaming runtime should support streaming interfaces [It] runtime should support attach [Conformance]
  /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/streaming.go:264
  [TIMEDOUT] [k8s.io] Security Context bucket [It] runtime should return error if RunAsGroup is set without RunAsUser
  /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/security_context_linux.go:1340

Ran 105 of 122 Specs in 73.303 seconds
FAIL! -- 94 Passed | 2 Failed | 0 Pending | 17 Skipped


Ginkgo ran 1 suite in 1m13.544129371s

Test Suite Failed
--- FAIL: TestCRISuite (73.60s)
`

func TestParseSummary(t *testing.T) {
	s, ok := ParseSummary(failedRun)
	require.True(t, ok)
	require.Equal(t, "Ran 105 of 122 Specs in 73.303 seconds; FAIL! -- 94 Passed | 2 Failed | 0 Pending | 17 Skipped", s.Line)
	require.Equal(t, Summary{
		Line: s.Line, Ran: 105, Total: 122, Passed: 94, Failed: 2, Pending: 0, Skipped: 17,
		Duration: 73303 * time.Millisecond,
		Failures: []string{
			"[FAIL] [k8s.io] Streaming runtime should support streaming interfaces [It] runtime should support attach [Conformance]\n" +
				"  /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/streaming.go:264",
			"[TIMEDOUT] [k8s.io] Security Context bucket [It] runtime should return error if RunAsGroup is set without RunAsUser\n" +
				"  /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/security_context_linux.go:1340",
		},
		RuntimeSkips: map[string]int{
			"AppArmor is disabled on this host":                             1,
			"The runtime does not support SupplementalGroupsPolicy feature": 1,
		},
	}, s)
	require.Contains(t, s.String(), "skipped while running (1): AppArmor is disabled on this host")
	require.Equal(t, []string{
		"[k8s.io] Security Context bucket [It] runtime should return error if RunAsGroup is set without RunAsUser",
		"[k8s.io] Streaming runtime should support streaming interfaces [It] runtime should support attach [Conformance]",
	}, s.FailedSpecs())
}

func TestParseSummarySuccess(t *testing.T) {
	out := "\x1b[1mRan 9 of 122 Specs in 3.942 seconds\x1b[0m\n" +
		"\x1b[32mSUCCESS!\x1b[0m -- 9 Passed | 0 Failed | 1 Flaked | 0 Pending | 113 Skipped\nPASS\n"
	s, ok := ParseSummary(out)
	require.True(t, ok)
	require.True(t, s.Succeeded)
	require.Equal(t, 9, s.Passed)
	require.Equal(t, 1, s.Flaked)
	require.Equal(t, 113, s.Skipped)
	require.Empty(t, s.Failures)
}

func TestParseSummaryMissing(t *testing.T) {
	for _, out := range []string{"", "critest version: v1.36.0\npanic: boom\n", "Ran 3 of 122 Specs in 1.0 seconds\n"} {
		_, ok := ParseSummary(out)
		require.False(t, ok, out)
	}
}

// A failed spec's block as critest v1.36.0 prints it (ginkgo v2.28.1's
// DefaultReporter, -ginkgo.v): the timeline's "[FAILED] in [It]" marks where,
// the "[FAILED] <message>" after the timeline says what.
const failedSpec = `• [FAILED] [2.112 seconds]
[k8s.io] Container runtime should support log [It] runtime should support starting container with log [Conformance]
/root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/container.go:415

  Timeline >>
  STEP: start container with log @ 11/26/26 21:54:30.101
  [FAILED] in [It] - /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/container.go:519 @ 11/26/26 21:54:30.190
  << Timeline

  [FAILED] failed to start container: rpc error: code = NotFound desc = task x: not found
  Unexpected error:
      <*status.Error | 0xc000a1b2c0>:
      rpc error: code = NotFound desc = task x: not found
  occurred
  In [It] at: /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/container.go:519 @ 11/26/26 21:54:30.190
------------------------------
[TIMEDOUT] A suite timeout occurred
In [It] at: /root/x.go:1 @ 11/26/26 21:55:00.000

Summarizing 1 Failure:
  [FAIL] [k8s.io] Container runtime should support log [It] runtime should support starting container with log [Conformance]
  /root/go/pkg/mod/sigs.k8s.io/cri-tools@v1.36.0/pkg/validate/container.go:519

Ran 107 of 122 Specs in 32.686 seconds
FAIL! -- 106 Passed | 1 Failed | 0 Pending | 15 Skipped
`

func TestParseSummaryMessages(t *testing.T) {
	s, ok := ParseSummary(failedSpec)
	require.True(t, ok)
	require.Equal(t, []string{
		"[FAILED] failed to start container: rpc error: code = NotFound desc = task x: not found\n" +
			"  Unexpected error:\n" +
			"  <*status.Error | 0xc000a1b2c0>:\n" +
			"  rpc error: code = NotFound desc = task x: not found\n" +
			"  occurred",
		"[TIMEDOUT] A suite timeout occurred",
	}, s.Messages)
	s, ok = ParseSummary(failedRun)
	require.True(t, ok)
	require.Empty(t, s.Messages, "a skip's reason or a heading is no failure message")
}
