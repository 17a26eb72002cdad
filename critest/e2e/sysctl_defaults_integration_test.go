//go:build integration

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// unprivilegedProbe prints the pod's two sysctls, then whether a process without
// capabilities may listen on port 80 and ping the pod's loopback through an ICMP echo
// socket (critest/icmpecho, mounted at /icmpecho: busybox's ping needs a raw socket).
const unprivilegedProbe = `cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/net/ipv4/ping_group_range
nc -l -p 80 2>/dev/null & p=$!; sleep 1
if kill -0 $p 2>/dev/null; then echo listen=yes; kill $p; else echo listen=no; fi
/icmpecho | head -n 1`

// hostSysctls reads the node's two sysctls.
func hostSysctls(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{"/proc/sys/net/ipv4/ip_unprivileged_port_start", "/proc/sys/net/ipv4/ping_group_range"} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		b.Write(data)
	}
	return b.String()
}

// TestUnprivilegedPortsAndPing: in both pause modes, a pod with a network namespace
// of its own gets containerd 2.x's defaults, ip_unprivileged_port_start 0 and
// ping_group_range "0 2147483647", so that a container of uid 1000 without
// capabilities listens on port 80 and pings; a pod that sets the first keeps its
// value (and its process cannot listen there); a pod on the node's network gets
// neither, and the node's values do not change. With enable_unprivileged_ports and
// enable_unprivileged_icmp off, pods get the kernel's defaults.
func TestUnprivilegedPortsAndPing(t *testing.T) {
	requireRoot(t)
	host := hostSysctls(t)
	icmpecho, err := harness.Build("./critest/icmpecho")
	require.NoError(t, err)
	t.Logf("the node's: %q", host)
	for _, tc := range []struct {
		name, pause, extra string
		defaults           bool
	}{
		{"pause-less", "when-needed", "", true},
		{"with a pause", "always", "", true},
		{"off", "when-needed", "enable_unprivileged_ports = false\nenable_unprivileged_icmp = false\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{Pause: tc.pause, ExtraConfig: tc.extra}})
			pull(t, env, busyboxImage)
			rs := env.Shimd.Runtime(t)
			own := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
			probe := func(name string, edit func(*runtimeapi.PodSandboxConfig)) string {
				cfg := podConfig(name)
				cfg.Linux.SecurityContext.NamespaceOptions = own
				if edit != nil {
					edit(cfg)
				}
				p := newPodOf(t, rs, cfg)
				defer stopRemove(t, rs, p.id)
				c := p.container("probe", "sleep", "3600")
				c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: own,
					RunAsUser: &runtimeapi.Int64Value{Value: 1000}, Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}}
				c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/icmpecho", HostPath: icmpecho, Readonly: true}}
				id := p.run(c)
				st, err := rs.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id, Verbose: true})
				require.NoError(t, err)
				var info struct {
					Pauseless bool `json:"pauseless"`
				}
				require.NoError(t, json.Unmarshal([]byte(st.Info["info"]), &info))
				require.Equal(t, tc.pause == "when-needed", info.Pauseless, "pod %s's pause mode", name)
				resp, err := execSync(t, rs, id, 30, "sh", "-c", unprivilegedProbe)
				require.NoError(t, err)
				require.Zero(t, resp.ExitCode, "stderr %q", resp.Stderr)
				t.Logf("%s: %q", name, resp.Stdout)
				return string(resp.Stdout)
			}
			if tc.defaults {
				require.Equal(t, "0\n0\t2147483647\nlisten=yes\nping=yes\n", probe("defaults", nil))
				require.Equal(t, "1024\n0\t2147483647\nlisten=no\nping=yes\n", probe("own-value", func(c *runtimeapi.PodSandboxConfig) {
					c.Linux.Sysctls = map[string]string{"net/ipv4/ip_unprivileged_port_start": "1024"}
				}))
			} else {
				require.Equal(t, "1024\n1\t0\nlisten=no\nping=no\n", probe("kernel-defaults", nil))
			}
			hostNet := probe("host-network", func(c *runtimeapi.PodSandboxConfig) {
				c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER}
			})
			require.True(t, strings.HasPrefix(hostNet, host), "a host-network pod sees the node's values %q, got %q", host, hostNet)
			require.Equal(t, host, hostSysctls(t), "the node's values unchanged")
			env.AssertNoLeaks(t, 30*time.Second)
		})
	}
}
