package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/sirupsen/logrus"
)

// The configuration's checks: each names the key it refuses, so that shimd stops at
// start with the reason instead of failing at the first pod.

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
	if err := c.Registry.validateVerifiers(); err != nil {
		return err
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

// validateVerifiers checks the image verifier keys.
func (r RegistryConfig) validateVerifiers() error {
	if r.ImageVerifierDir == "" {
		return nil
	}
	if !filepath.IsAbs(r.ImageVerifierDir) {
		return fmt.Errorf("config key registry.image_verifier_dir: must be an absolute path (or \"\" for none), got %q", r.ImageVerifierDir)
	}
	if r.MaxImageVerifiers < -1 || r.MaxImageVerifiers == 0 {
		return fmt.Errorf("config key registry.max_image_verifiers: must be 1 or more, or -1 for all, got %d (set registry.image_verifier_dir = \"\" to run none)", r.MaxImageVerifiers)
	}
	if r.ImageVerifierTimeout <= 0 {
		return fmt.Errorf("config key registry.image_verifier_timeout: must be positive, got %s", time.Duration(r.ImageVerifierTimeout))
	}
	return nil
}
