package main

import (
	"os"
	"path/filepath"
	"testing"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/network"
)

func TestHandlerRuntime(t *testing.T) {
	dir := t.TempDir()
	runscToml := filepath.Join(dir, "runsc.toml")
	require.NoError(t, os.WriteFile(runscToml, []byte("binary_name = \"/opt/bin/runsc\"\nroot = \"/run/gvisor\"\n"+
		"[runsc_config]\nplatform = \"systrap\"\ndebug = \"true\"\n"), 0o600))
	cfg := DefaultConfig()
	cfg.StateDir = "/run/shimd"
	cfg.Containerd.Namespace = "shimd"

	t.Run("runc gets runc's options", func(t *testing.T) {
		rt, err := handlerRuntime(cfg, "runc", RuntimeConfig{Type: RuncType, BinaryName: "/usr/sbin/runc", SystemdCgroup: true})
		require.NoError(t, err)
		require.Equal(t, &runcoptions.Options{BinaryName: "/usr/sbin/runc", SystemdCgroup: true}, rt.Options)
		require.Nil(t, rt.Dialer)
		require.Equal(t, "overlayfs", rt.Snapshotter)
	})
	t.Run("pods may go without a pause on runc's shim with a host-kernel runtime only", func(t *testing.T) {
		for _, tt := range []struct {
			rc   RuntimeConfig
			want bool
		}{
			{RuntimeConfig{Type: RuncType}, true},
			{RuntimeConfig{Type: RuncType, BinaryName: "/usr/sbin/runc"}, true},
			{RuntimeConfig{Type: "/opt/bin/containerd-shim-runc-v2"}, true},
			{RuntimeConfig{Type: RuncType, Sandboxed: true}, false},
			{RuntimeConfig{Type: RuncType, BinaryName: "/usr/local/bin/runsc"}, false},
			{RuntimeConfig{Type: RuncType, BinaryName: "kata-runtime"}, false},
			{RuntimeConfig{Type: RunscType}, false},
			{RuntimeConfig{Type: "io.containerd.kata.v2"}, false},
		} {
			rt, err := handlerRuntime(cfg, "h", tt.rc)
			require.NoError(t, err)
			require.Equal(t, tt.want, rt.PauseOptional, "%+v", tt.rc)
		}
	})
	t.Run("runsc gets the CRI plugin's runtime options, and shimd reads its file", func(t *testing.T) {
		rc := RuntimeConfig{Type: RunscType, ConfigPath: runscToml, Snapshotter: "native"}
		rt, err := handlerRuntime(cfg, "runsc", rc)
		require.NoError(t, err)
		require.Equal(t, &runtimeoptions.Options{TypeUrl: "io.containerd.runsc.v1.options", ConfigPath: runscToml}, rt.Options)
		require.Equal(t, "native", rt.Snapshotter)
		require.Equal(t, &network.Runsc{Binary: "/opt/bin/runsc", Root: "/run/gvisor/shimd",
			Flags: []string{"--debug=true", "--platform=systrap"}, SocketDir: "/run/shimd/runsc"}, rt.Dialer)
		require.Equal(t, "/opt/bin/runsc", featuresBinary(rc, rt))
	})
	t.Run("shims named by path", func(t *testing.T) {
		rt, err := handlerRuntime(cfg, "runc", RuntimeConfig{Type: "/opt/bin/containerd-shim-runc-v2", BinaryName: "/opt/bin/runc"})
		require.NoError(t, err)
		require.Equal(t, &runcoptions.Options{BinaryName: "/opt/bin/runc"}, rt.Options)
		rt, err = handlerRuntime(cfg, "runsc", RuntimeConfig{Type: "/opt/bin/containerd-shim-runsc-v1", ConfigPath: runscToml})
		require.NoError(t, err)
		require.Equal(t, "/opt/bin/runsc", rt.Dialer.(*network.Runsc).Binary)
	})
	t.Run("runsc without a file: the shim's defaults", func(t *testing.T) {
		rt, err := handlerRuntime(cfg, "runsc", RuntimeConfig{Type: RunscType})
		require.NoError(t, err)
		require.Equal(t, "runsc", rt.Dialer.(*network.Runsc).Binary)
		require.Equal(t, "/run/containerd/runsc/shimd", rt.Dialer.(*network.Runsc).Root)
	})
	t.Run("a missing runsc file names the key", func(t *testing.T) {
		_, err := handlerRuntime(cfg, "gvisor", RuntimeConfig{Type: RunscType, ConfigPath: filepath.Join(dir, "missing.toml")})
		require.ErrorContains(t, err, "config key runtimes.gvisor.config_path")
	})
	t.Run("another shim: options only, no features binary", func(t *testing.T) {
		rc := RuntimeConfig{Type: "io.containerd.kata.v2", ConfigPath: "/etc/kata/configuration.toml"}
		rt, err := handlerRuntime(cfg, "kata", rc)
		require.NoError(t, err)
		require.Equal(t, &runtimeoptions.Options{TypeUrl: "io.containerd.kata.v2.options", ConfigPath: "/etc/kata/configuration.toml"}, rt.Options)
		require.Nil(t, rt.Dialer)
		require.Equal(t, "", featuresBinary(rc, rt))
	})
}
