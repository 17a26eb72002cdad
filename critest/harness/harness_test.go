package harness

import (
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"
)

// These tests need neither root nor daemons.

func TestParseContainerdVersion(t *testing.T) {
	for _, tc := range []struct {
		name, out    string
		major, minor int
	}{
		{"2.4", "containerd github.com/containerd/containerd/v2 v2.4.2 \n", 2, 4},
		{"debian 1.6", "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", 1, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := parseContainerdVersion(tc.out)
			require.NoError(t, err)
			require.Equal(t, tc.major, v.Major)
			require.Equal(t, tc.minor, v.Minor)
		})
	}
	_, err := parseContainerdVersion("garbage")
	require.Error(t, err)
}

func TestContainerdConfigIsTOML(t *testing.T) {
	l := newContainerdLayout("/tmp/shimd-it-1")
	cri := &criConfig{CNIConfDir: "/tmp/x/net.d", CNIBinDir: CNIBinDir, Runc: "/bin/runc", SandboxImage: DefaultSandboxImage}
	for _, tc := range []struct {
		name  string
		major int
		cri   *criConfig
		want  []string
	}{
		{"2.x", 2, nil, []string{"version = 3", `"io.containerd.cri.v1.runtime"`, "socket_dir"}},
		{"2.x cri", 2, cri, []string{"restrict_oom_score_adj = true", "bin_dirs", "pinned_images", `"io.containerd.nri.v1.nri"`}},
		{"1.6", 1, nil, []string{"version = 2", `disabled_plugins = ["io.containerd.grpc.v1.cri"]`}},
		{"1.6 cri", 1, cri, []string{"sandbox_image", "bin_dir =", "restrict_oom_score_adj = true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := containerdConfig(tc.major, l, "debug", tc.cri, "[plugins.'x.y'.z]\n  a = 1")
			var m map[string]any
			_, err := toml.Decode(s, &m)
			require.NoError(t, err, s)
			for _, w := range tc.want {
				require.Contains(t, s, w)
			}
			require.Equal(t, l.Address, m["grpc"].(map[string]any)["address"])
		})
	}
}

func TestShimdConfigIsTOML(t *testing.T) {
	s := shimdConfig(&Shimd{dir: "/tmp/b", ns: "shimd"}, "/tmp/c.sock", "/bin/runc", "", "debug", "foo = 1\n[bar]\nx = 2")
	var m map[string]any
	_, err := toml.Decode(s, &m)
	require.NoError(t, err, s)
	require.EqualValues(t, 1, m["foo"])
	require.Equal(t, "/tmp/b/shimd.sock", m["socket"])
	require.Equal(t, "shimd", m["containerd"].(map[string]any)["namespace"])
	require.Equal(t, "/bin/runc", m["runtimes"].(map[string]any)["runc"].(map[string]any)["binary_name"])
}

func TestNATRuleParsing(t *testing.T) {
	line := `-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"shimd-it\" id: \"abc\"" -m multiport --dports 8080 -j CNI-DN-1234`
	f := splitQuoted(line)
	require.Equal(t, []string{"-A", "CNI-HOSTPORT-DNAT", "-p", "tcp", "-m", "comment", "--comment",
		`dnat name: "shimd-it" id: "abc"`, "-m", "multiport", "--dports", "8080", "-j", "CNI-DN-1234"}, f)
	require.Equal(t, "CNI-DN-1234", jumpTarget(f))

	_, sub, _ := net.ParseCIDR("198.18.7.0/24")
	require.True(t, mentionsSubnet(strings.Fields("-j DNAT --to-destination 198.18.7.2:80"), sub))
	require.True(t, mentionsSubnet(strings.Fields("-s 198.18.7.0/24 -j X"), sub))
	require.False(t, mentionsSubnet(strings.Fields("-s 198.18.8.0/24 -d 127.0.0.1/32"), sub))
}

func TestParseMountinfo(t *testing.T) {
	m, ok := parseMountinfo(`36 35 98:0 /mnt1 /tmp/a\040b rw,noatime master:1 - nsfs nsfs rw`)
	require.True(t, ok)
	require.Equal(t, mount{Point: "/tmp/a b", FSType: "nsfs", Source: "nsfs", Dev: "98:0"}, m)
}

func TestDedupeRoots(t *testing.T) {
	require.Equal(t, []string{"/tmp/a", "/tmp/ab"}, dedupeRoots([]string{"/tmp/a/x", "/tmp/ab", "", "/tmp/a", "/tmp/a/"}))
}

func TestLogLinesAbout(t *testing.T) {
	id := strings.Repeat("ab", 32)
	other := strings.Repeat("cd", 32)
	path := t.TempDir() + "/d.log"
	var log strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&log, "line %d id=%s\n", i, id)
		fmt.Fprintf(&log, "noise %d\n", i)
	}
	require.NoError(t, os.WriteFile(path, []byte(log.String()), 0o600))

	out := logLinesAbout(path, []string{"containerd container shimd-1/" + id + " (image x)", "process 12 shim -id " + id, "mount /x"}, 3)
	require.Equal(t, "20 lines of "+path+" name "+id+"; the last 3:\n"+
		"    line 17 id="+id+"\n    line 18 id="+id+"\n    line 19 id="+id+"\n", out, "each id once, its last lines")

	out = logLinesAbout(path, []string{"snapshot " + other}, 3)
	require.Equal(t, "0 lines of "+path+" name "+other+"; the last 0:\n", out)
	require.Empty(t, logLinesAbout(path, []string{"mount /x", "IPAM lease 198.18.0.2"}, 3), "no id, nothing to look up")
}

func TestSummaryGoesToTheTopLevelTest(t *testing.T) {
	s := summaryOf(t)
	t.Run("sub", func(t *testing.T) {
		require.Same(t, s, summaryOf(t), "a subtest adds to its top-level test's summary")
		summaryOf(t).add(t, "first\nsecond")
	})
	require.Equal(t, []string{"- " + t.Name() + "/sub: first\n    second"}, s.lines)
	s.lines = nil // this test passes: nothing to print
}

func TestNotableLines(t *testing.T) {
	path := t.TempDir() + "/shimd.log"
	log := `===== harness: shimd starting at 2026-11-23T20:00:00Z
time="..." level=info msg=done duration=1ms rpc=ListPodSandbox
time="..." level=warning msg=failed error="rpc error: code = NotFound desc = container \"x\": not found" rpc=ContainerStatus
time="..." level=info msg="recovery done" duration=20ms
time="..." level=info msg="stopped orphaned shim" shim=abc
time="..." level=warning msg="remove orphaned container" error="busy"
time="..." level=debug msg=done rpc=Version
`
	require.NoError(t, os.WriteFile(path, []byte(log), 0o600))
	lines := strings.Split(notableLines(path, 10), "\n")
	require.Len(t, lines, 4, "restarts, recovery, sweeps and warnings; not RPC noise: %q", lines)
	require.Contains(t, lines[0], "shimd starting")
	require.Contains(t, lines[3], "remove orphaned container")
	require.Len(t, strings.Split(notableLines(path, 2), "\n"), 2, "only the last n")
}

func TestLeakCounts(t *testing.T) {
	leaks := []string{
		"pinned namespace file /s/pins/net-1",
		"mount /s/netns/cni-1 (nsfs nsfs)",
		"mount /r/io.containerd.runtime.v2.task/x/rootfs (overlay overlay)",
		"IPAM lease 198.18.0.5 in network n (owner \"x\")",
		"cgroup /sys/fs/cgroup/memory/ns/abc (pids 12)",
		"process 123 containerd-shim-runc-v2 -namespace ns",
		"containerd container ns/abc (image \"\", snapshot /, labels map[])",
		"sandbox store record ns/abc (labels map[])",
		"lease ns/l1 (created 2026-11-26T00:00:00Z, labels map[])",
		"active snapshot ns/overlayfs \"abc\" (parent \"sha256:1\")",
		"cannot list leases in ns: boom",
	}
	got := LeakCounts(leaks)
	want := map[string]int{"netns": 2, "IP leases": 1, "mounts": 1, "cgroups": 1, "shims and other processes": 1,
		"containers": 2, "leases": 1, "snapshots": 1, "checks that failed": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LeakCounts = %v, want %v", got, want)
	}
	if s := FormatLeakCounts(LeakCounts(nil)); s != "netns 0, IP leases 0, mounts 0, cgroups 0, shims and other processes 0, containers 0, leases 0, snapshots 0, checks that failed 0" {
		t.Fatalf("FormatLeakCounts(none) = %q", s)
	}
}
