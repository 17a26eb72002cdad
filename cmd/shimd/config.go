package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is shimd's configuration file (TOML). Every key is documented in README.md;
// `shimd config default` prints the defaults. Unknown keys are rejected.
type Config struct {
	// Socket is the CRI gRPC unix socket (mode 0660).
	Socket string `toml:"socket"`
	// RootDir holds durable per-pod files (hosts, resolv.conf, hostname).
	RootDir string `toml:"root_dir"`
	// StateDir holds runtime state: network namespaces, /dev/shm mounts.
	StateDir string `toml:"state_dir"`
	// ContainerFsDir, when set, holds the containers' writable layers, apart from the
	// image layers in the snapshotter's directory: a split image filesystem
	// (KEP-4191) when it is on another filesystem. Empty (the default): the writable
	// layers are the snapshotter's.
	ContainerFsDir string `toml:"container_fs_dir"`
	// LogLevel is one of trace, debug, info, warn, error.
	LogLevel string `toml:"log_level"`
	// CgroupDriver is cgroupfs or systemd: the form of cgroupsPath runc gets, runc's
	// own driver (runtimes.NAME.systemd_cgroup follows it), and what RuntimeConfig
	// reports to the kubelet. Not given, it follows the default runtime's
	// systemd_cgroup.
	CgroupDriver string `toml:"cgroup_driver"`
	// DefaultRuntime names the entry of Runtimes used for an empty runtime handler.
	DefaultRuntime string `toml:"default_runtime"`
	// SweepInterval is no longer used: shimd retries each cleanup that failed
	// (package cleanup) instead of sweeping periodically. Accepted, with a
	// warning, so that a config that sets it still starts.
	SweepInterval Duration `toml:"sweep_interval"`
	// EventedPLEGStatus makes PodSandboxStatus carry a timestamp and the statuses of
	// the pod's containers (the evented PLEG's one-call pod status). Off by default:
	// kubelet v1.37 with EventedPLEG on then loses the pod's active container statuses
	// and runs init containers again and again (kubernetes#133371).
	EventedPLEGStatus bool `toml:"evented_pleg_status"`
	// EnableSELinux gives each pod an SELinux MCS level of its own, labels its and
	// its containers' processes and files from their SELinuxOptions and relabels
	// the mounts with selinux_relabel (docs/operating.md, "SELinux"). Off by
	// default, as containerd's enable_selinux: it needs a policy with container
	// types, and it changes the labels of files on the node. Without SELinux in the
	// kernel it does nothing (with a warning).
	EnableSELinux bool `toml:"enable_selinux"`
	// RejectAbsentMountSources refuses a container whose bind-mount host path is
	// missing (NotFound, as the CRI's api.proto words it) instead of making it a
	// directory, as containerd's CRI plugin, CRI-O and Docker do (the default:
	// manifests such as flannel's DaemonSet rely on it). docs/operating.md,
	// "hostPath volumes".
	RejectAbsentMountSources bool `toml:"reject_absent_mount_sources"`
	// EnableUnprivilegedPorts sets net.ipv4.ip_unprivileged_port_start = 0 in every
	// pod with a network namespace of its own that does not set it, so that non-root
	// processes may listen on ports below 1024; EnableUnprivilegedICMP sets
	// net.ipv4.ping_group_range = "0 2147483647" likewise (not in pods with a user
	// namespace), so that any user may ping. Both on by default, as containerd 2.x's
	// keys of the same names (docs/operating.md, "Sysctls").
	EnableUnprivilegedPorts bool `toml:"enable_unprivileged_ports"`
	EnableUnprivilegedICMP  bool `toml:"enable_unprivileged_icmp"`
	// DeviceOwnershipFromSecurityContext makes the devices a container asks for
	// belong to its run_as_user and run_as_group (where they are not 0) instead of
	// their owners on the host, as containerd's and CRI-O's key of the same name:
	// a non-root container may then open a device only root may open on the node.
	// Off by default, as theirs.
	DeviceOwnershipFromSecurityContext bool `toml:"device_ownership_from_security_context"`

	Containerd ContainerdConfig         `toml:"containerd"`
	CNI        CNIConfig                `toml:"cni"`
	Sandbox    SandboxConfig            `toml:"sandbox"`
	Runtimes   map[string]RuntimeConfig `toml:"runtimes"`
	Streaming  StreamingConfig          `toml:"streaming"`
	Registry   RegistryConfig           `toml:"registry"`
	Debug      DebugConfig              `toml:"debug"`
	Metrics    MetricsConfig            `toml:"metrics"`
	CDI        CDIConfig                `toml:"cdi"`
	NRI        NRIConfig                `toml:"nri"`
}

// ContainerdConfig says where containerd is and which namespace is ours.
type ContainerdConfig struct {
	Address     string `toml:"address"`
	Namespace   string `toml:"namespace"`
	Snapshotter string `toml:"snapshotter"`
}

// CNIConfig locates CNI network configs and plugins.
type CNIConfig struct {
	ConfDir  string   `toml:"conf_dir"`
	BinDirs  []string `toml:"bin_dirs"`
	CacheDir string   `toml:"cache_dir"`
}

// SandboxConfig configures pod sandboxes.
type SandboxConfig struct {
	// Image is the pause image; empty means the built-in one.
	Image string `toml:"image"`
	// Pause is "when-needed" (the default: pods that need no pause container get
	// none, see sandbox/pauseless.go; CRI-O's drop_infra_ctr, on by default there
	// too) or "always" (every pod has a pause container, as containerd's CRI plugin).
	Pause string `toml:"pause"`
}

// RuntimeConfig is one runtime handler.
type RuntimeConfig struct {
	// Type is the containerd runtime (shim) name.
	Type string `toml:"type"`
	// BinaryName is the OCI runtime binary the runc shim runs (empty: runc on PATH).
	BinaryName string `toml:"binary_name"`
	// Root is the OCI runtime's state root (empty: the shim's default).
	Root string `toml:"root"`
	// SystemdCgroup makes runc use the systemd cgroup driver. Not given, it follows
	// cgroup_driver; given, it must agree with it.
	SystemdCgroup bool `toml:"systemd_cgroup"`
	// ConfigPath is the options file of a shim other than runc's (for
	// io.containerd.runsc.v1, the runsc shim's TOML file: binary_name, root,
	// [runsc_config]), handed to the shim as containerd's CRI plugin does.
	ConfigPath string `toml:"config_path"`
	// Snapshotter overrides containerd.snapshotter for this handler.
	Snapshotter string `toml:"snapshotter"`
	// Sandboxed says the handler's OCI runtime is a VM or an application kernel
	// (e.g. binary_name = "runsc"): its pods always get a pause container.
	Sandboxed bool `toml:"sandboxed"`
}

// StreamingConfig configures the Exec/Attach/PortForward server.
type StreamingConfig struct {
	Address string `toml:"address"`
	Port    int    `toml:"port"`
	// TLSCertFile and TLSKeyFile, both set, make the server HTTPS.
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
}

// DebugConfig configures the debug endpoint (/debug/pprof/, /debug/stats).
type DebugConfig struct {
	// Address is an absolute unix socket path or IP:port; empty (the default) is off.
	Address string `toml:"address"`
	// BlockProfileRate turns on Go's block profile (/debug/pprof/block): on average
	// one sample per this many nanoseconds spent blocked (runtime.SetBlockProfileRate).
	// 0 (the default) is off. It costs CPU on every blocking event: for measuring only.
	BlockProfileRate int `toml:"block_profile_rate"`
	// MutexProfileFraction turns on Go's mutex profile (/debug/pprof/mutex): on
	// average one of this many contended mutex events is recorded
	// (runtime.SetMutexProfileFraction). 0 (the default) is off.
	MutexProfileFraction int `toml:"mutex_profile_fraction"`
}

// MetricsConfig configures the Prometheus endpoint (/metrics).
type MetricsConfig struct {
	// Address is IP:port or an absolute unix socket path; empty (the default) is off.
	Address string `toml:"address"`
}

// CDIConfig configures the Container Device Interface.
type CDIConfig struct {
	// Enabled turns CDI device injection on.
	Enabled bool `toml:"enabled"`
	// SpecDirs are the directories of CDI spec files, in increasing priority; shimd
	// watches them.
	SpecDirs []string `toml:"spec_dirs"`
}

// NRIConfig configures Node Resource Interface plugins.
type NRIConfig struct {
	// Enabled turns NRI on.
	Enabled bool `toml:"enabled"`
	// SocketPath is where external plugins connect.
	SocketPath string `toml:"socket_path"`
	// PluginPath holds plugins shimd starts itself; PluginConfigPath their config.
	PluginPath       string `toml:"plugin_path"`
	PluginConfigPath string `toml:"plugin_config_path"`
	// DisableConnections refuses plugins that connect to the socket by themselves.
	DisableConnections bool `toml:"disable_connections"`
	// PluginRegistrationTimeout and PluginRequestTimeout bound a plugin's
	// registration and each request to it.
	PluginRegistrationTimeout Duration `toml:"plugin_registration_timeout"`
	PluginRequestTimeout      Duration `toml:"plugin_request_timeout"`
}

// RegistryConfig configures image pulls.
type RegistryConfig struct {
	// ConfigPath is a directory of hosts.toml files in containerd's format.
	ConfigPath string `toml:"config_path"`
	// PullProgressTimeout cancels a pull that receives nothing for this long.
	PullProgressTimeout Duration `toml:"pull_progress_timeout"`
	// UnpackLayers is how many layers of a pull are extracted at once where the
	// snapshotter can rebase (overlayfs on containerd 2.x): 0 is one per CPU, 3 to
	// 6; 1 applies the layers one by one, each on its parent.
	UnpackLayers int `toml:"unpack_layers"`
	// ImageVerifierDir holds the image verifiers: executables run before each pull,
	// in name order, in containerd's bindir protocol (image/verify.go). The default is
	// containerd's own directory, so that a node's verifiers judge both runtimes'
	// pulls; a directory that does not exist allows every pull; "" runs none.
	ImageVerifierDir string `toml:"image_verifier_dir"`
	// MaxImageVerifiers is how many of the directory's verifiers run, the first in
	// name order; -1: all.
	MaxImageVerifiers int `toml:"max_image_verifiers"`
	// ImageVerifierTimeout bounds each verifier's run; past it the pull is blocked.
	ImageVerifierTimeout Duration `toml:"image_verifier_timeout"`
}

// Duration is a time.Duration written as a string ("5m", "30s") in TOML.
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText renders the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// DefaultConfig returns the configuration used when no file is given.
func DefaultConfig() Config {
	return Config{
		Socket:         "/run/shimd/shimd.sock",
		RootDir:        "/var/lib/shimd",
		StateDir:       "/run/shimd",
		LogLevel:       "info",
		CgroupDriver:   "cgroupfs",
		DefaultRuntime: "runc",
		// containerd 2.x's defaults.
		EnableUnprivilegedPorts: true, EnableUnprivilegedICMP: true,
		Containerd: ContainerdConfig{
			Address:     "/run/containerd/containerd.sock",
			Namespace:   "shimd",
			Snapshotter: "overlayfs",
		},
		CNI: CNIConfig{
			ConfDir:  "/etc/cni/net.d",
			BinDirs:  []string{"/opt/cni/bin", "/usr/lib/cni"},
			CacheDir: "/var/lib/shimd/cni",
		},
		Sandbox: SandboxConfig{Pause: "when-needed"},
		Runtimes: map[string]RuntimeConfig{
			"runc": {Type: "io.containerd.runc.v2"},
		},
		Streaming: StreamingConfig{Address: "127.0.0.1"},
		Registry: RegistryConfig{
			PullProgressTimeout: Duration(5 * time.Minute),
			// containerd's defaults (plugins/imageverifier).
			ImageVerifierDir: "/opt/containerd/image-verifier/bin", MaxImageVerifiers: 10, ImageVerifierTimeout: Duration(10 * time.Second),
		},
		CDI: CDIConfig{Enabled: true, SpecDirs: []string{"/etc/cdi", "/var/run/cdi"}},
		NRI: NRIConfig{
			Enabled: true, SocketPath: "/run/shimd/nri/nri.sock", PluginPath: "/opt/nri/plugins", PluginConfigPath: "/etc/nri/conf.d",
			PluginRegistrationTimeout: Duration(5 * time.Second), PluginRequestTimeout: Duration(2 * time.Second),
		},
	}
}

// LoadConfig reads path over the defaults. A missing file yields the defaults only when
// mustExist is false (the default path); a named file must exist.
func LoadConfig(path string, mustExist bool) (Config, error) {
	cfg := DefaultConfig()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !mustExist {
		return cfg, cfg.Validate()
	}
	if err != nil {
		return cfg, fmt.Errorf("read config: %w (give an existing file to --config, or leave --config out to use %s if present, else the defaults)", err, "/etc/shimd/config.toml")
	}
	return parseConfig(cfg, data, path)
}

func parseConfig(cfg Config, data []byte, path string) (Config, error) {
	// Runtimes given in the file replace nothing: "runc" stays unless redefined.
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, 0, len(und))
		for _, k := range und {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		return cfg, fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	if err := cfg.deriveCgroupDriver(md); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, cfg.Validate()
}

// JSON renders the configuration as JSON with the TOML file's key names (for crictl
// info).
func (c Config) JSON() (string, error) {
	b, err := c.Encode()
	if err != nil {
		return "", err
	}
	var m map[string]any
	if _, err := toml.Decode(string(b), &m); err != nil {
		return "", err
	}
	out, err := json.Marshal(m)
	return string(out), err
}

// Encode renders the configuration as TOML.
func (c Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	err := toml.NewEncoder(&buf).Encode(c)
	return buf.Bytes(), err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// commentedHeader starts the config file `make install` writes.
const commentedHeader = `# shimd configuration (TOML), as written by "make install".
# Every key is listed with its default value, commented out: uncomment and change what
# you need, then restart shimd (systemctl restart shimd; pods keep running). README.md
# ("Configuration") explains each key; "shimd config default" prints these defaults.
# shimd refuses unknown keys and invalid values at start with a message naming the key.
# Metrics (Prometheus, off by default): set [metrics] address = "127.0.0.1:9101".

`

// defaultConfigText is what `shimd config default [--commented]` prints.
func defaultConfigText(commented bool) ([]byte, error) {
	out, err := DefaultConfig().Encode()
	if err != nil || !commented {
		return out, err
	}
	var b bytes.Buffer
	b.WriteString(commentedHeader)
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("# ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}

const usageHead = `Usage: shimd [flags]           run the CRI server
       shimd config default [--commented]   print the default config file

Flags:
`

const usageTail = `
The config file's keys are listed, with defaults, by "shimd config default" and
explained in README.md ("Configuration"). Errors at start name the key to fix, e.g.
"config key metrics.address: ... (e.g. "127.0.0.1:9101"; "" turns it off)".
Common fixes: containerd.address must be containerd's socket (is containerd running?);
socket must be a path no other process listens on; cni.conf_dir holds the network
config (NetworkReady stays false until a valid one appears there; shimd follows the
directory); metrics.address and debug.address are IP:port or an absolute socket path.
`
