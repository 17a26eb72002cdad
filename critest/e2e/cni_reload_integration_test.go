//go:build integration

package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// networkCondition is Status's NetworkReady condition and the network shimd uses.
func networkCondition(t *testing.T, rs runtimeapi.RuntimeServiceClient) (*runtimeapi.RuntimeCondition, string) {
	t.Helper()
	resp, err := rs.Status(ctxT(t, 10*time.Second), &runtimeapi.StatusRequest{Verbose: true})
	require.NoError(t, err)
	var netInfo struct{ Name string }
	require.NoError(t, json.Unmarshal([]byte(resp.Info["network"]), &netInfo))
	for _, c := range resp.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady {
			return c, netInfo.Name
		}
	}
	t.Fatal("Status has no NetworkReady condition")
	return nil, ""
}

// installConf moves a network config written elsewhere into the conf dir in one rename,
// as node tools replace configs.
func installConf(t *testing.T, n *harness.CNINetwork, confDir string) {
	t.Helper()
	require.NoError(t, os.Rename(n.ConfPath, filepath.Join(confDir, "10-net.conflist")))
}

// leases lists host-local's address files for network name in dataDir.
func leases(t *testing.T, dataDir, name string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, name))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestCNIConfigFollowsTheNode(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{NoCNIConfig: true}})
	rs := env.Shimd.Runtime(t)
	confDir := env.Shimd.CNIConfDir()
	staging := filepath.Join(env.Base, "net-staging")
	require.Eventually(t, func() bool {
		_, err := rs.Status(ctxT(t, 5*time.Second), &runtimeapi.StatusRequest{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)

	// 1. No config: not ready, with a reason.
	cond, _ := networkCondition(t, rs)
	require.False(t, cond.Status)
	require.Equal(t, "NetworkPluginNotReady", cond.Reason)
	require.Contains(t, cond.Message, "no CNI network config")

	// 2. A config appears: ready, and pods get it.
	a := harness.WriteCNIConfig(t, staging, harness.CNIOptions{Name: "reload-a", Bridge: "shimdrla",
		Subnet: "198.19.200.0/24", DataDir: filepath.Join(env.Base, "ipam-a"), FileName: "a.conflist"})
	installConf(t, a, confDir)
	require.Eventually(t, func() bool { c, name := networkCondition(t, rs); return c.Status && name == "reload-a" },
		10*time.Second, 50*time.Millisecond)
	podA := runPod(t, rs, podConfig("net-a"))
	ipA := net.ParseIP(podStatus(t, rs, podA).Network.Ip)
	require.True(t, a.Subnet.Contains(ipA), "pod IP %s not in %s", ipA, a.Subnet)
	require.Equal(t, []string{ipA.String()}, leases(t, a.DataDir, a.Name))

	// 3. An invalid file first by name: reported, the last good config stays in use.
	broken := filepath.Join(confDir, "05-broken.conflist")
	require.NoError(t, os.WriteFile(broken, []byte(`{"cniVersion": "1.0.0", "name": `), 0o644))
	require.Eventually(t, func() bool { c, _ := networkCondition(t, rs); return c.Reason == "InvalidNetworkConfig" },
		10*time.Second, 50*time.Millisecond)
	cond, name := networkCondition(t, rs)
	require.True(t, cond.Status, "pods still get the last good network")
	require.Contains(t, cond.Message, "05-broken.conflist")
	require.Equal(t, "reload-a", name)
	require.NoError(t, os.Remove(broken))
	require.Eventually(t, func() bool { c, _ := networkCondition(t, rs); return c.Status && c.Reason == "" },
		10*time.Second, 50*time.Millisecond)

	// 4. The config is replaced by another bridge and subnet: new pods use it.
	b := harness.WriteCNIConfig(t, staging, harness.CNIOptions{Name: "reload-b", Bridge: "shimdrlb",
		Subnet: "198.19.201.0/24", DataDir: filepath.Join(env.Base, "ipam-b"), FileName: "b.conflist"})
	installConf(t, b, confDir)
	require.Eventually(t, func() bool { c, name := networkCondition(t, rs); return c.Status && name == "reload-b" },
		10*time.Second, 50*time.Millisecond)
	podB := runPod(t, rs, podConfig("net-b"))
	ipB := net.ParseIP(podStatus(t, rs, podB).Network.Ip)
	require.True(t, b.Subnet.Contains(ipB), "pod IP %s not in %s", ipB, b.Subnet)
	require.Equal(t, []string{ipB.String()}, leases(t, b.DataDir, b.Name))

	// 5. Both go. The first pod is torn down with the config it was set up with (from
	// libcni's cache): its lease lives only in network A's IPAM directory, which the
	// current config does not even name.
	stopRemove(t, rs, podA)
	require.Empty(t, leases(t, a.DataDir, a.Name), "pod A's address was released through its own config")
	require.Equal(t, []string{ipB.String()}, leases(t, b.DataDir, b.Name))
	stopRemove(t, rs, podB)
	require.Empty(t, leases(t, b.DataDir, b.Name))
	cache, err := os.ReadDir(filepath.Join(env.Shimd.CNICacheDir(), "results"))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
		for _, e := range cache {
			require.False(t, strings.Contains(e.Name(), podA) || strings.Contains(e.Name(), podB), "cache entry %s left", e.Name())
		}
	}
}
