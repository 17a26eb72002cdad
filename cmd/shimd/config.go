package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/sirupsen/logrus"
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
		Registry:  RegistryConfig{PullProgressTimeout: Duration(5 * time.Minute)},
		CDI:       CDIConfig{Enabled: true, SpecDirs: []string{"/etc/cdi", "/var/run/cdi"}},
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

// deriveCgroupDriver makes cgroup_driver and the runc handlers' systemd_cgroup one
// setting, as containerd does (its CRI plugin reports the default runtime's
// SystemdCgroup): either key alone sets the other; given both, they must agree.
// cgroup_driver, when not given, follows the default runtime's systemd_cgroup; a runc
// handler whose systemd_cgroup is not given follows cgroup_driver.
func (c *Config) deriveCgroupDriver(md toml.MetaData) error {
	given := func(name string) bool { return md.IsDefined("runtimes", name, "systemd_cgroup") }
	if !md.IsDefined("cgroup_driver") {
		if rt, ok := c.Runtimes[c.DefaultRuntime]; ok && isShim(rt.Type, RuncType) && given(c.DefaultRuntime) && rt.SystemdCgroup {
			c.CgroupDriver = "systemd"
		}
	}
	for _, name := range sortedKeys(c.Runtimes) {
		rt := c.Runtimes[name]
		if !isShim(rt.Type, RuncType) || given(name) {
			continue
		}
		rt.SystemdCgroup = c.CgroupDriver == "systemd"
		c.Runtimes[name] = rt
	}
	return c.checkCgroupDriver()
}

// checkCgroupDriver refuses a runc handler whose systemd_cgroup contradicts
// cgroup_driver: runc would get a cgroupsPath in the other driver's form.
func (c *Config) checkCgroupDriver() error {
	for _, name := range sortedKeys(c.Runtimes) {
		rt := c.Runtimes[name]
		if isShim(rt.Type, RuncType) && rt.SystemdCgroup != (c.CgroupDriver == "systemd") {
			return fmt.Errorf("config keys cgroup_driver and runtimes.%s.systemd_cgroup contradict each other "+
				"(cgroup_driver = %q, systemd_cgroup = %t): set one of them, or both to the same driver", name, c.CgroupDriver, rt.SystemdCgroup)
		}
	}
	return nil
}

// Validate rejects values shimd cannot work with, naming the key.
func (c *Config) Validate() error {
	abs := map[string]string{
		"socket": c.Socket, "root_dir": c.RootDir, "state_dir": c.StateDir,
		"containerd.address": c.Containerd.Address, "cni.conf_dir": c.CNI.ConfDir,
		"cni.cache_dir": c.CNI.CacheDir,
	}
	for _, k := range sortedKeys(abs) {
		if v := abs[k]; v == "" || !filepath.IsAbs(v) {
			return fmt.Errorf("config key %s: must be an absolute path, got %q", k, v)
		}
	}
	if c.ContainerFsDir != "" && !filepath.IsAbs(c.ContainerFsDir) {
		return fmt.Errorf("config key container_fs_dir: must be an absolute path, got %q", c.ContainerFsDir)
	}
	for i, d := range c.CNI.BinDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("config key cni.bin_dirs[%d]: must be an absolute path, got %q", i, d)
		}
	}
	for i, d := range c.CDI.SpecDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("config key cdi.spec_dirs[%d]: must be an absolute path, got %q", i, d)
		}
	}
	if c.CDI.Enabled && len(c.CDI.SpecDirs) == 0 {
		return errors.New("config key cdi.spec_dirs: must not be empty while cdi.enabled is true (set cdi.enabled = false to turn CDI off)")
	}
	if err := c.NRI.validate(); err != nil {
		return err
	}
	if c.Registry.ConfigPath != "" && !filepath.IsAbs(c.Registry.ConfigPath) {
		return fmt.Errorf("config key registry.config_path: must be an absolute path, got %q", c.Registry.ConfigPath)
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("config key log_level: %q is not one of trace, debug, info, warn, error", c.LogLevel)
	}
	if c.CgroupDriver != "cgroupfs" && c.CgroupDriver != "systemd" {
		return fmt.Errorf("config key cgroup_driver: %q is not cgroupfs or systemd", c.CgroupDriver)
	}
	if err := c.checkCgroupDriver(); err != nil {
		return err
	}
	if c.Containerd.Namespace == "" || c.Containerd.Namespace == "k8s.io" {
		return fmt.Errorf("config key containerd.namespace: %q is not allowed (must be set, and not k8s.io, which containerd's own CRI plugin uses)", c.Containerd.Namespace)
	}
	if c.Sandbox.Pause != "always" && c.Sandbox.Pause != "when-needed" {
		return fmt.Errorf("config key sandbox.pause: %q is not always or when-needed", c.Sandbox.Pause)
	}
	if c.Containerd.Snapshotter == "" {
		return errors.New("config key containerd.snapshotter: must not be empty")
	}
	for _, name := range sortedKeys(c.Runtimes) {
		if err := c.Runtimes[name].validate(name); err != nil {
			return err
		}
	}
	if _, ok := c.Runtimes[c.DefaultRuntime]; !ok {
		return fmt.Errorf("config key default_runtime: %q is not defined under [runtimes]", c.DefaultRuntime)
	}
	if c.SweepInterval < 0 {
		return fmt.Errorf("config key sweep_interval: must not be negative, got %s", time.Duration(c.SweepInterval))
	}
	if c.Registry.UnpackLayers < 0 {
		return fmt.Errorf("config key registry.unpack_layers: must be 0 (one per CPU) or more, got %d", c.Registry.UnpackLayers)
	}
	if c.Registry.PullProgressTimeout <= 0 {
		return fmt.Errorf("config key registry.pull_progress_timeout: must be positive, got %s", time.Duration(c.Registry.PullProgressTimeout))
	}
	if c.Streaming.Port < 0 || c.Streaming.Port > 65535 {
		return fmt.Errorf("config key streaming.port: %d is out of range 0-65535", c.Streaming.Port)
	}
	return c.validateStreamingAndDebug()
}

// RuncType is the runtime type of runc's shim: the only one that takes binary_name,
// root and systemd_cgroup. Every other shim gets config_path.
const RuncType = "io.containerd.runc.v2"

// isShim tells whether a runtime type names the shim of runtime type want: the type
// itself, or an absolute path to that shim's binary (containerd runs it as given),
// "containerd-shim-<name>-<version>" for "io.containerd.<name>.<version>".
func isShim(typ, want string) bool {
	if typ == want {
		return true
	}
	parts := strings.Split(want, ".")
	if !filepath.IsAbs(typ) || len(parts) != 4 {
		return false
	}
	return filepath.Base(typ) == "containerd-shim-"+parts[2]+"-"+parts[3]
}

func (rt RuntimeConfig) validate(name string) error {
	if rt.Type == "" {
		return fmt.Errorf("config key runtimes.%s.type: must not be empty", name)
	}
	if !isShim(rt.Type, RuncType) {
		if rt.BinaryName != "" || rt.Root != "" || rt.SystemdCgroup {
			return fmt.Errorf("config key runtimes.%s: binary_name, root and systemd_cgroup are options of %s only; "+
				"a %s shim takes its options from the file named by config_path", name, RuncType, rt.Type)
		}
		if rt.ConfigPath != "" && !filepath.IsAbs(rt.ConfigPath) {
			return fmt.Errorf("config key runtimes.%s.config_path: must be an absolute path, got %q", name, rt.ConfigPath)
		}
		return nil
	}
	if rt.ConfigPath != "" {
		return fmt.Errorf("config key runtimes.%s.config_path: not used by %s (set binary_name, root, systemd_cgroup)", name, RuncType)
	}
	if rt.BinaryName != "" && !filepath.IsAbs(rt.BinaryName) && strings.Contains(rt.BinaryName, "/") {
		return fmt.Errorf("config key runtimes.%s.binary_name: must be absolute or a bare name, got %q", name, rt.BinaryName)
	}
	return nil
}

func (c *Config) validateStreamingAndDebug() error {
	if a := c.Streaming.Address; a != "" && net.ParseIP(a) == nil {
		return fmt.Errorf("config key streaming.address: %q is not an IP address", a)
	}
	tls := map[string]string{"streaming.tls_cert_file": c.Streaming.TLSCertFile, "streaming.tls_key_file": c.Streaming.TLSKeyFile}
	for _, k := range sortedKeys(tls) {
		if v := tls[k]; v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("config key %s: must be an absolute path, got %q", k, v)
		}
	}
	if (c.Streaming.TLSCertFile == "") != (c.Streaming.TLSKeyFile == "") {
		return errors.New("config keys streaming.tls_cert_file and streaming.tls_key_file: set both or neither")
	}
	if c.Debug.BlockProfileRate < 0 || c.Debug.MutexProfileFraction < 0 {
		return errors.New("config keys debug.block_profile_rate and debug.mutex_profile_fraction: must be 0 (off) or more")
	}
	if (c.Debug.BlockProfileRate > 0 || c.Debug.MutexProfileFraction > 0) && c.Debug.Address == "" {
		return errors.New("config keys debug.block_profile_rate and debug.mutex_profile_fraction: need debug.address, where the profiles are served")
	}
	addrs := map[string]string{"debug.address": c.Debug.Address, "metrics.address": c.Metrics.Address}
	for _, k := range sortedKeys(addrs) {
		if a := addrs[k]; a != "" && !filepath.IsAbs(a) {
			if host, _, err := net.SplitHostPort(a); err != nil || net.ParseIP(host) == nil {
				return fmt.Errorf("config key %s: %q is neither an absolute unix socket path nor IP:port (e.g. \"127.0.0.1:9101\"; \"\" turns it off)", k, a)
			}
		}
	}
	return nil
}

func (n *NRIConfig) validate() error {
	paths := map[string]string{"nri.socket_path": n.SocketPath, "nri.plugin_path": n.PluginPath, "nri.plugin_config_path": n.PluginConfigPath}
	for _, k := range sortedKeys(paths) {
		if v := paths[k]; v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("config key %s: must be an absolute path, got %q", k, v)
		}
	}
	if n.Enabled && !n.DisableConnections && n.SocketPath == "" {
		return errors.New("config key nri.socket_path: must be set while nri.enabled is true (or set nri.disable_connections = true)")
	}
	if len(n.SocketPath) > 100 {
		return fmt.Errorf("config key nri.socket_path: %q is too long for a unix socket", n.SocketPath)
	}
	for k, d := range map[string]Duration{"nri.plugin_registration_timeout": n.PluginRegistrationTimeout, "nri.plugin_request_timeout": n.PluginRequestTimeout} {
		if d <= 0 {
			return fmt.Errorf("config key %s: must be positive, got %s", k, time.Duration(d))
		}
	}
	return nil
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
