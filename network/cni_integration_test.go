//go:build integration

package network

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A pod that maps no port is attached and detached without the portmap plugin, one
// that maps a port with it, and each is detached with the list it was attached with
// (libcni's cache), whatever the mappings passed to Teardown. The plugins are
// scripts that log their calls; the namespace is real (loopback is set up in it).
func TestPortmapRunsOnlyForMappedPorts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	dir := t.TempDir()
	bin, conf, logf := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d"), filepath.Join(dir, "calls")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.MkdirAll(conf, 0o755))
	// Both answer ADD with the same result; a real portmap hands its previous
	// result on, which is what this one's stands for.
	script := `#!/bin/sh
cat >/dev/null
echo "$(basename "$0") $CNI_COMMAND $CNI_CONTAINERID" >>` + logf + `
[ "$CNI_COMMAND" = ADD ] || exit 0
printf '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"%s"}],"ips":[{"address":"198.18.9.2/24","interface":0}]}' "$CNI_NETNS"
`
	for _, name := range []string{"fakebridge", "portmap"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(conf, "10-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[
		{"type":"fakebridge"},{"type":"portmap","capabilities":{"portMappings":true}}]}`), 0o644))
	c, err := NewCNI(Options{ConfDir: conf, BinDirs: []string{bin}, CacheDir: filepath.Join(dir, "cache")})
	require.NoError(t, err)
	ns := filepath.Join(dir, "netns")
	require.NoError(t, CreateNetNS(ns))
	t.Cleanup(func() { _ = RemoveNetNS(ns) })

	calls := func() []string {
		b, err := os.ReadFile(logf)
		require.NoError(t, err)
		require.NoError(t, os.Remove(logf))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	ctx := context.Background()
	mapped := []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}

	res, err := c.Setup(ctx, Attachment{ID: "plain", NetNSPath: ns})
	require.NoError(t, err)
	require.Equal(t, "198.18.9.2", res.IPs[0].String())
	require.Equal(t, []string{"fakebridge ADD plain"}, calls())
	_, err = c.Setup(ctx, Attachment{ID: "mapped", NetNSPath: ns, PortMappings: mapped})
	require.NoError(t, err)
	require.Equal(t, []string{"fakebridge ADD mapped", "portmap ADD mapped"}, calls())

	// DEL runs the cached list: mappings passed now or not change nothing.
	require.NoError(t, c.Teardown(ctx, Attachment{ID: "plain", NetNSPath: ns, PortMappings: mapped}))
	require.Equal(t, []string{"fakebridge DEL plain"}, calls())
	require.NoError(t, c.Teardown(ctx, Attachment{ID: "mapped", NetNSPath: ns}))
	require.Equal(t, []string{"portmap DEL mapped", "fakebridge DEL mapped"}, calls())
	require.False(t, c.Attached("plain"))
	require.False(t, c.Attached("mapped"))

	// Without a cached attachment (lost with the cache), DEL runs the current list,
	// less portmap when no mappings are known.
	require.NoError(t, c.Teardown(ctx, Attachment{ID: "gone", NetNSPath: ns}))
	require.Equal(t, []string{"fakebridge DEL gone"}, calls())
}
