package network

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/require"
)

func conflist(name string) string {
	return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"bridge","bridge":"br-` + name + `"}]}`
}

func TestReloadKeepsLastGoodConfig(t *testing.T) {
	dir := t.TempDir()
	c, err := NewCNI(Options{ConfDir: dir, CacheDir: t.TempDir()})
	require.NoError(t, err)
	require.ErrorIs(t, c.Ready(), ErrNoConfig)
	require.ErrorContains(t, c.Ready(), "cni.conf_dir")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "10-a.conflist"), []byte(conflist("a")), 0o644))
	c.Reload()
	require.NoError(t, c.Ready())
	require.Empty(t, c.ConfigWarning())

	// An invalid file first by name: reported, and "a" stays in use.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "05-bad.conflist"), []byte("{not json"), 0o644))
	c.Reload()
	require.NoError(t, c.Ready())
	require.Contains(t, c.ConfigWarning(), "05-bad.conflist")
	require.Contains(t, c.ConfigWarning(), `still using network "a"`)
	list, err := c.network()
	require.NoError(t, err)
	require.Equal(t, "a", list.Name)
	require.Contains(t, c.Describe(), `"name":"a"`)
	require.Contains(t, c.Describe(), `05-bad.conflist`)

	// Fixed: the new file wins and the warning goes.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "05-bad.conflist"), []byte(conflist("b")), 0o644))
	c.Reload()
	require.Empty(t, c.ConfigWarning())
	list, err = c.network()
	require.NoError(t, err)
	require.Equal(t, "b", list.Name)

	// All gone: not ready.
	require.NoError(t, os.Remove(filepath.Join(dir, "05-bad.conflist")))
	require.NoError(t, os.Remove(filepath.Join(dir, "10-a.conflist")))
	c.Reload()
	require.ErrorIs(t, c.Ready(), ErrNoConfig)
}

func TestWatchFollowsTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d") // Watch creates it
	c, err := NewCNI(Options{ConfDir: dir, CacheDir: t.TempDir()})
	require.NoError(t, err)
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, 10*time.Millisecond) }()
	name := func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.list == nil {
			return ""
		}
		return c.list.Name
	}
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return err == nil }, 5*time.Second, 10*time.Millisecond)
	// Replaced by rename, as tools write configs atomically.
	tmp := filepath.Join(filepath.Dir(dir), "tmp.conflist")
	for _, n := range []string{"first", "second"} {
		require.NoError(t, os.WriteFile(tmp, []byte(conflist(n)), 0o644))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "10-net.conflist")))
		require.Eventually(t, func() bool { return name() == n }, 5*time.Second, 10*time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not stop when its context ended")
	}
}

func TestTeardownFindsTheCachedConfig(t *testing.T) {
	cache := t.TempDir()
	c, err := NewCNI(Options{ConfDir: t.TempDir(), CacheDir: cache})
	require.NoError(t, err)
	rt := c.runtimeConf(Attachment{ID: "pod1"}, "eth0")
	list, _, err := c.cachedNetwork(rt)
	require.NoError(t, err)
	require.Nil(t, list, "nothing cached yet")

	// What libcni's ADD writes: results/<network>-<container>-<ifname>.
	old, err := libcni.ConfListFromBytes([]byte(conflist("old")))
	require.NoError(t, err)
	entry := `{"kind":"cniCacheV1","containerId":"pod1","ifName":"eth0","networkName":"old","config":` +
		mustJSON(t, old.Bytes) + `,"cniArgs":[["K8S_POD_NAME","p"]]}`
	require.NoError(t, os.MkdirAll(filepath.Join(cache, "results"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cache, "results", "old-pod1-eth0"), []byte(entry), 0o600))
	list, cached, err := c.cachedNetwork(rt)
	require.NoError(t, err)
	require.NotNil(t, list)
	require.Equal(t, "old", list.Name)
	require.Contains(t, string(list.Plugins[0].Bytes), `"br-old"`)
	require.Equal(t, [][2]string{{"K8S_POD_NAME", "p"}}, cached.Args)
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

func TestWithoutPortmap(t *testing.T) {
	parse := func(s string) *libcni.NetworkConfigList {
		l, err := libcni.ConfListFromBytes([]byte(s))
		require.NoError(t, err)
		return l
	}
	list := parse(`{"cniVersion":"1.0.0","name":"pods","disableCheck":true,"plugins":[
		{"type":"bridge","bridge":"br0","ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.4.0/24"}]]}},
		{"type":"portmap","capabilities":{"portMappings":true}},
		{"type":"tuning","sysctl":{"net.core.somaxconn":"500"}}]}`)
	out := withoutPortmap(list)
	require.NotNil(t, out)
	require.Equal(t, "pods", out.Name)
	require.Equal(t, "1.0.0", out.CNIVersion)
	require.True(t, out.DisableCheck)
	var types []string
	for _, p := range out.Plugins {
		types = append(types, p.Network.Type)
	}
	require.Equal(t, []string{"bridge", "tuning"}, types)
	// The kept plugins' configs are whole (the bridge's IPAM, tuning's sysctl), and
	// Bytes, which ADD caches for DEL, parses to the same list.
	require.JSONEq(t, `{"type":"bridge","bridge":"br0","ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.4.0/24"}]]}}`, string(out.Plugins[0].Bytes))
	require.JSONEq(t, `{"type":"tuning","sysctl":{"net.core.somaxconn":"500"}}`, string(out.Plugins[1].Bytes))
	again := parse(string(out.Bytes))
	require.Len(t, again.Plugins, 2)
	require.Equal(t, "tuning", again.Plugins[1].Network.Type)
	// The original is untouched.
	require.Len(t, list.Plugins, 3)

	// Nothing to drop, or nothing left: no second list.
	require.Nil(t, withoutPortmap(parse(conflist("a"))))
	require.Nil(t, withoutPortmap(parse(`{"cniVersion":"1.0.0","name":"p","plugins":[{"type":"portmap"}]}`)))
}
