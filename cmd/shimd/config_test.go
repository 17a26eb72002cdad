package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file gives defaults", file: "", check: func(t *testing.T, c Config) {
			require.Equal(t, DefaultConfig(), c)
		}},
		{name: "overrides", file: "socket = \"/tmp/x.sock\"\n[containerd]\nnamespace = \"other\"\n[runtimes.kata]\ntype = \"io.containerd.kata.v2\"\n",
			check: func(t *testing.T, c Config) {
				require.Equal(t, "/tmp/x.sock", c.Socket)
				require.Equal(t, "other", c.Containerd.Namespace)
				require.Equal(t, "/run/containerd/containerd.sock", c.Containerd.Address)
				require.Contains(t, c.Runtimes, "runc", "the default handler stays when others are added")
				require.Equal(t, "io.containerd.kata.v2", c.Runtimes["kata"].Type)
			}},
		{name: "unknown top-level key", file: "sockett = \"/x\"\n", wantErr: "unknown key sockett"},
		{name: "unknown nested key", file: "[cni]\nconfdir = \"/x\"\n", wantErr: "unknown key cni.confdir"},
		{name: "relative path", file: "root_dir = \"var/lib\"\n", wantErr: "config key root_dir"},
		{name: "bad log level", file: "log_level = \"loud\"\n", wantErr: "config key log_level"},
		{name: "bad cgroup driver", file: "cgroup_driver = \"cgroupv3\"\n", wantErr: "config key cgroup_driver"},
		{name: "bad pause mode", file: "[sandbox]\npause = \"never\"\n", wantErr: "config key sandbox.pause"},
		{name: "pause when needed by default", file: "", check: func(t *testing.T, c Config) {
			require.Equal(t, "when-needed", c.Sandbox.Pause)
		}},
		{name: "pause always", file: "[sandbox]\npause = \"always\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, "always", c.Sandbox.Pause)
		}},
		{name: "k8s.io namespace", file: "[containerd]\nnamespace = \"k8s.io\"\n", wantErr: "config key containerd.namespace"},
		{name: "undefined default runtime", file: "default_runtime = \"kata\"\n", wantErr: "config key default_runtime"},
		{name: "runtime without type", file: "[runtimes.kata]\nbinary_name = \"kata\"\n", wantErr: "config key runtimes.kata.type"},
		{name: "runc options on another shim", file: "[runtimes.runsc]\ntype = \"io.containerd.runsc.v1\"\nbinary_name = \"runsc\"\n", wantErr: "config key runtimes.runsc: binary_name, root and systemd_cgroup are options of io.containerd.runc.v2 only"},
		{name: "relative config_path", file: "[runtimes.runsc]\ntype = \"io.containerd.runsc.v1\"\nconfig_path = \"runsc.toml\"\n", wantErr: "config key runtimes.runsc.config_path: must be an absolute path"},
		{name: "config_path on runc", file: "[runtimes.runc]\ntype = \"io.containerd.runc.v2\"\nconfig_path = \"/etc/runc.toml\"\n", wantErr: "config key runtimes.runc.config_path: not used"},
		{name: "runc's shim by path takes runc's options", file: "[runtimes.runc]\ntype = \"/opt/bin/containerd-shim-runc-v2\"\nbinary_name = \"/opt/bin/runc\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, "/opt/bin/runc", c.Runtimes["runc"].BinaryName)
		}},
		{name: "another shim by path takes no runc options", file: "[runtimes.x]\ntype = \"/opt/bin/containerd-shim-runsc-v1\"\nroot = \"/run/x\"\n", wantErr: "config key runtimes.x: binary_name, root and systemd_cgroup"},
		{name: "runsc handler", file: "[runtimes.runsc]\ntype = \"io.containerd.runsc.v1\"\nconfig_path = \"/etc/shimd/runsc.toml\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, RuntimeConfig{Type: RunscType, ConfigPath: "/etc/shimd/runsc.toml"}, c.Runtimes["runsc"])
		}},
		{name: "sweep_interval, no longer used, still loads", file: "sweep_interval = \"1m\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, Duration(time.Minute), c.SweepInterval)
		}},
		{name: "port out of range", file: "[streaming]\nport = 70000\n", wantErr: "config key streaming.port"},
		{name: "pull progress timeout", file: "[registry]\npull_progress_timeout = \"30s\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, Duration(30*time.Second), c.Registry.PullProgressTimeout)
		}},
		{name: "bad duration", file: "[registry]\npull_progress_timeout = \"soon\"\n", wantErr: "pull_progress_timeout"},
		{name: "layers one by one", file: "[registry]\nunpack_layers = 1\n", check: func(t *testing.T, c Config) {
			require.Equal(t, 1, c.Registry.UnpackLayers)
		}},
		{name: "negative unpack_layers", file: "[registry]\nunpack_layers = -2\n", wantErr: "config key registry.unpack_layers"},
		{name: "image verifiers at containerd's defaults", file: "", check: func(t *testing.T, c Config) {
			require.Equal(t, "/opt/containerd/image-verifier/bin", c.Registry.ImageVerifierDir)
			require.Equal(t, 10, c.Registry.MaxImageVerifiers)
			require.Equal(t, Duration(10*time.Second), c.Registry.ImageVerifierTimeout)
		}},
		{name: "no image verifiers", file: "[registry]\nimage_verifier_dir = \"\"\nmax_image_verifiers = 0\n", check: func(t *testing.T, c Config) {
			require.Empty(t, c.Registry.ImageVerifierDir)
		}},
		{name: "relative image_verifier_dir", file: "[registry]\nimage_verifier_dir = \"verifiers\"\n", wantErr: "config key registry.image_verifier_dir: must be an absolute path"},
		{name: "zero max_image_verifiers", file: "[registry]\nmax_image_verifiers = 0\n", wantErr: "config key registry.max_image_verifiers"},
		{name: "all image verifiers", file: "[registry]\nmax_image_verifiers = -1\n", check: func(t *testing.T, c Config) {
			require.Equal(t, -1, c.Registry.MaxImageVerifiers)
		}},
		{name: "zero image_verifier_timeout", file: "[registry]\nimage_verifier_timeout = \"0s\"\n", wantErr: "config key registry.image_verifier_timeout"},
		{name: "tls cert without key", file: "[streaming]\ntls_cert_file = \"/etc/shimd/cert.pem\"\n", wantErr: "streaming.tls"},
		{name: "relative tls cert", file: "[streaming]\ntls_cert_file = \"cert.pem\"\ntls_key_file = \"/k.pem\"\n", wantErr: "streaming.tls_cert_file"},
		{name: "streaming address must be an IP", file: "[streaming]\naddress = \"localhost\"\n", wantErr: "streaming.address"},
		{name: "debug address must be an IP:port or a path", file: "[debug]\naddress = \"localhost:6060\"\n", wantErr: "debug.address"},
		{name: "debug on a unix socket", file: "[debug]\naddress = \"/run/shimd/debug.sock\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, "/run/shimd/debug.sock", c.Debug.Address)
		}},
		{name: "contention profiles", file: "[debug]\naddress = \"/run/shimd/debug.sock\"\nblock_profile_rate = 10000\nmutex_profile_fraction = 5\n", check: func(t *testing.T, c Config) {
			require.Equal(t, 10000, c.Debug.BlockProfileRate)
			require.Equal(t, 5, c.Debug.MutexProfileFraction)
		}},
		{name: "contention profiles need the debug address", file: "[debug]\nblock_profile_rate = 10000\n", wantErr: "need debug.address"},
		{name: "negative mutex fraction", file: "[debug]\naddress = \"/run/shimd/debug.sock\"\nmutex_profile_fraction = -1\n", wantErr: "must be 0 (off) or more"},
		{name: "metrics address must be an IP:port or a path", file: "[metrics]\naddress = \":9101\"\n", wantErr: "config key metrics.address"},
		{name: "metrics on loopback", file: "[metrics]\naddress = \"127.0.0.1:9101\"\n", check: func(t *testing.T, c Config) {
			require.Equal(t, "127.0.0.1:9101", c.Metrics.Address)
		}},
		{name: "type mismatch", file: "[streaming]\nport = \"x\"\n", wantErr: "port"},
		{name: "cdi spec dirs replace the defaults", file: "[cdi]\nspec_dirs = [\"/x/cdi\"]\n", check: func(t *testing.T, c Config) {
			require.True(t, c.CDI.Enabled)
			require.Equal(t, []string{"/x/cdi"}, c.CDI.SpecDirs)
		}},
		{name: "cdi off", file: "[cdi]\nenabled = false\nspec_dirs = []\n", check: func(t *testing.T, c Config) {
			require.False(t, c.CDI.Enabled)
		}},
		{name: "cdi relative spec dir", file: "[cdi]\nspec_dirs = [\"cdi\"]\n", wantErr: "config key cdi.spec_dirs[0]"},
		{name: "cdi on without spec dirs", file: "[cdi]\nspec_dirs = []\n", wantErr: "config key cdi.spec_dirs"},
		{name: "nri", file: "[nri]\nsocket_path = \"/x/nri.sock\"\nplugin_request_timeout = \"500ms\"\n", check: func(t *testing.T, c Config) {
			require.True(t, c.NRI.Enabled)
			require.Equal(t, "/x/nri.sock", c.NRI.SocketPath)
			require.Equal(t, Duration(500*time.Millisecond), c.NRI.PluginRequestTimeout)
			require.Equal(t, Duration(5*time.Second), c.NRI.PluginRegistrationTimeout)
		}},
		{name: "nri relative plugin path", file: "[nri]\nplugin_path = \"plugins\"\n", wantErr: "config key nri.plugin_path"},
		{name: "nri zero timeout", file: "[nri]\nplugin_request_timeout = \"0s\"\n", wantErr: "config key nri.plugin_request_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
			c, err := LoadConfig(path, true)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.toml")
	c, err := LoadConfig(missing, false)
	require.NoError(t, err, "a missing default file means defaults")
	require.Equal(t, DefaultConfig(), c)
	_, err = LoadConfig(missing, true)
	require.Error(t, err, "a named file must exist")
}

func TestDefaultConfigRoundTrips(t *testing.T) {
	out, err := DefaultConfig().Encode()
	require.NoError(t, err)
	require.True(t, strings.Contains(string(out), `socket = "/run/shimd/shimd.sock"`), string(out))
	c, err := parseConfig(Config{}, out, "default")
	require.NoError(t, err)
	require.Equal(t, DefaultConfig(), c)
}

func TestConfigFromFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("log_level = \"warn\"\n"), 0o600))
	c, err := configFromFlags([]string{"--config", path, "--socket", "/tmp/s.sock", "--log-level", "debug"})
	require.NoError(t, err)
	require.Equal(t, "/tmp/s.sock", c.Socket)
	require.Equal(t, "debug", c.LogLevel)
	_, err = configFromFlags([]string{"--config", path, "--socket", "rel.sock"})
	require.ErrorContains(t, err, "config key socket")
}

func TestCommentedDefaultConfig(t *testing.T) {
	out, err := defaultConfigText(true)
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		require.True(t, line == "" || strings.HasPrefix(line, "#"), "uncommented line %q", line)
	}
	// Every key is there: uncommenting gives exactly the defaults.
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "# ") && !strings.HasPrefix(string(out), line) {
			b.WriteString(strings.TrimPrefix(line, "# ") + "\n")
		}
	}
	body := b.String()[strings.Index(b.String(), "socket = "):]
	c, err := parseConfig(Config{}, []byte(body), "commented")
	require.NoError(t, err)
	require.Equal(t, DefaultConfig(), c)
	// The file as written parses too (all defaults).
	c, err = parseConfig(DefaultConfig(), out, "commented")
	require.NoError(t, err)
	require.Equal(t, DefaultConfig(), c)
}

// cgroup_driver and runtimes.NAME.systemd_cgroup are one setting: either alone sets
// the other, both must agree.
func TestOneCgroupDriver(t *testing.T) {
	parse := func(file string) (Config, error) { return parseConfig(DefaultConfig(), []byte(file), "test.toml") }
	tests := []struct {
		name, file string
		driver     string
		systemd    map[string]bool
		wantErr    string
	}{
		{name: "defaults", driver: "cgroupfs", systemd: map[string]bool{"runc": false}},
		{name: "cgroup_driver sets runc's", file: "cgroup_driver = \"systemd\"\n", driver: "systemd", systemd: map[string]bool{"runc": true}},
		{name: "default runtime's systemd_cgroup sets the driver", file: "[runtimes.runc]\ntype = \"io.containerd.runc.v2\"\nsystemd_cgroup = true\n",
			driver: "systemd", systemd: map[string]bool{"runc": true}},
		{name: "every runc handler follows", file: "cgroup_driver = \"systemd\"\n[runtimes.other]\ntype = \"io.containerd.runc.v2\"\nbinary_name = \"runc2\"\n",
			driver: "systemd", systemd: map[string]bool{"runc": true, "other": true}},
		{name: "both agree", file: "cgroup_driver = \"systemd\"\n[runtimes.runc]\ntype = \"io.containerd.runc.v2\"\nsystemd_cgroup = true\n",
			driver: "systemd", systemd: map[string]bool{"runc": true}},
		{name: "systemd_cgroup true under cgroupfs", file: "cgroup_driver = \"cgroupfs\"\n[runtimes.runc]\ntype = \"io.containerd.runc.v2\"\nsystemd_cgroup = true\n",
			wantErr: "config keys cgroup_driver and runtimes.runc.systemd_cgroup contradict each other"},
		{name: "systemd_cgroup false under systemd", file: "cgroup_driver = \"systemd\"\n[runtimes.runc]\ntype = \"io.containerd.runc.v2\"\nsystemd_cgroup = false\n",
			wantErr: "config keys cgroup_driver and runtimes.runc.systemd_cgroup contradict each other"},
		{name: "another handler's systemd_cgroup contradicts the derived driver",
			file:    "[runtimes.other]\ntype = \"io.containerd.runc.v2\"\nsystemd_cgroup = true\n",
			wantErr: "runtimes.other.systemd_cgroup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.file)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.driver, c.CgroupDriver)
			for name, want := range tc.systemd {
				require.Equal(t, want, c.Runtimes[name].SystemdCgroup, name)
			}
		})
	}
	// Validate alone (flags over a file) catches the contradiction too.
	c := DefaultConfig()
	c.CgroupDriver = "systemd"
	require.ErrorContains(t, c.Validate(), "contradict")
}

func TestSystemdDriverNeedsSystemd(t *testing.T) {
	defer func(old string) { systemdRunDir = old }(systemdRunDir)
	systemdRunDir = filepath.Join(t.TempDir(), "system")
	require.NoError(t, checkCgroupDriverHost("cgroupfs"))
	require.ErrorContains(t, checkCgroupDriverHost("systemd"), "config key cgroup_driver: \"systemd\" needs systemd running as PID 1")
	require.NoError(t, os.Mkdir(systemdRunDir, 0o755))
	require.NoError(t, checkCgroupDriverHost("systemd"))
}
