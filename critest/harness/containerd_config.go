package harness

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// containerdLayout is where one test containerd keeps its files.
type containerdLayout struct {
	Dir       string // config.toml and containerd.log live here
	Root      string
	State     string
	Address   string // gRPC socket
	TTRPC     string
	Debug     string // debug socket: /debug/pprof/ and /debug/vars
	ShimSocks string // shim socket directory (2.x only; at most 42 bytes)
	Opt       string // io.containerd.internal.v1.opt
	RuncRoot  string // runc --root for the CRI plugin's runc runtime
}

func newContainerdLayout(dir string) containerdLayout {
	return containerdLayout{
		Dir:       dir,
		Root:      filepath.Join(dir, "root"),
		State:     filepath.Join(dir, "state"),
		Address:   filepath.Join(dir, "containerd.sock"),
		TTRPC:     filepath.Join(dir, "containerd.sock.ttrpc"),
		Debug:     filepath.Join(dir, "debug.sock"),
		ShimSocks: filepath.Join(dir, "s"),
		Opt:       filepath.Join(dir, "opt"),
		RuncRoot:  filepath.Join(dir, "runc"),
	}
}

// criConfig is what the built-in CRI plugin gets when ContainerdOptions.WithCRI.
type criConfig struct {
	CNIConfDir         string
	CNIBinDir          string
	Runc               string
	SandboxImage       string
	RegistryConfigPath string
	// RunscConfigPath, if set, adds the handler "runsc" with this options file.
	RunscConfigPath string
	// StatsCollectPeriod, if set, is the 2.x runtime plugin's stats_collect_period.
	StatsCollectPeriod string
	// PullProgressTimeout, if set, is the 2.x images plugin's image_pull_progress_timeout.
	PullProgressTimeout string
}

// criPlugins2x are the CRI plugins of containerd 2.x, disabled unless WithCRI.
var criPlugins2x = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.cri.v1.runtime",
	"io.containerd.cri.v1.images",
}

// containerdConfig renders config.toml for containerd major version
// `major`: version 3 for 2.x, version 2 for 1.x. cri is nil to disable
// containerd's own CRI plugin.
func containerdConfig(major int, l containerdLayout, logLevel string, cri *criConfig, extra string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	q := strconv.Quote

	var disabled []string
	if major >= 2 {
		w("version = 3")
		// NRI would listen on /var/run/nri/nri.sock, shared by every daemon.
		disabled = append(disabled, "io.containerd.nri.v1.nri")
		if cri == nil {
			disabled = append(disabled, criPlugins2x...)
			// Depends on the CRI plugins; it would only log a failure.
			disabled = append(disabled, "io.containerd.podsandbox.controller.v1.podsandbox")
		}
	} else {
		w("version = 2")
		if cri == nil {
			disabled = append(disabled, "io.containerd.grpc.v1.cri")
		}
	}
	w("root = %s", q(l.Root))
	w("state = %s", q(l.State))
	w("imports = []")
	w("disabled_plugins = [%s]", quoteList(disabled))
	w("")
	w("[grpc]")
	w("  address = %s", q(l.Address))
	w("  tcp_address = \"\"")
	w("[ttrpc]")
	w("  address = %s", q(l.TTRPC))
	w("[debug]")
	w("  address = %s", q(l.Debug))
	w("  level = %s", q(logLevel))
	w("[metrics]")
	w("  address = \"\"")
	w("")
	w("[plugins]")
	w("  [plugins.'io.containerd.internal.v1.opt']")
	w("    path = %s", q(l.Opt))
	if major >= 2 {
		w("  [plugins.'io.containerd.shim.v1.manager']")
		w("    socket_dir = %s", q(l.ShimSocks))
	}
	if cri != nil {
		if major >= 2 {
			writeCRIv3(w, l, cri)
		} else {
			writeCRIv2(w, l, cri)
		}
	}
	if extra != "" {
		w("")
		w("%s", extra)
	}
	return b.String()
}

// writeCRIv3 writes the CRI sections of a version 3 config (containerd 2.x).
func writeCRIv3(w func(string, ...any), l containerdLayout, c *criConfig) {
	q := strconv.Quote
	w("  [plugins.'io.containerd.grpc.v1.cri']")
	w("    disable_tcp_service = true")
	w("    stream_server_address = '127.0.0.1'")
	w("    stream_server_port = '0'")
	w("  [plugins.'io.containerd.cri.v1.images']")
	w("    snapshotter = 'overlayfs'")
	if c.PullProgressTimeout != "" {
		w("    image_pull_progress_timeout = %s", q(c.PullProgressTimeout))
	}
	w("    [plugins.'io.containerd.cri.v1.images'.pinned_images]")
	w("      sandbox = %s", q(c.SandboxImage))
	w("    [plugins.'io.containerd.cri.v1.images'.registry]")
	w("      config_path = %s", q(c.RegistryConfigPath))
	w("  [plugins.'io.containerd.cri.v1.runtime']")
	w("    restrict_oom_score_adj = true")
	w("    netns_mounts_under_state_dir = true")
	if c.StatsCollectPeriod != "" {
		w("    stats_collect_period = %s", q(c.StatsCollectPeriod))
	}
	w("    [plugins.'io.containerd.cri.v1.runtime'.containerd]")
	w("      default_runtime_name = 'runc'")
	w("      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]")
	w("        runtime_type = 'io.containerd.runc.v2'")
	w("        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]")
	w("          BinaryName = %s", q(c.Runc))
	w("          Root = %s", q(l.RuncRoot))
	writeRunscRuntime(w, "'io.containerd.cri.v1.runtime'", c)
	w("    [plugins.'io.containerd.cri.v1.runtime'.cni]")
	w("      bin_dirs = [%s]", q(c.CNIBinDir))
	w("      conf_dir = %s", q(c.CNIConfDir))
	w("      max_conf_num = 1")
}

// writeCRIv2 writes the CRI section of a version 2 config (containerd 1.6).
func writeCRIv2(w func(string, ...any), l containerdLayout, c *criConfig) {
	q := strconv.Quote
	w("  [plugins.'io.containerd.grpc.v1.cri']")
	w("    disable_tcp_service = true")
	w("    stream_server_address = '127.0.0.1'")
	w("    stream_server_port = '0'")
	w("    sandbox_image = %s", q(c.SandboxImage))
	w("    restrict_oom_score_adj = true")
	w("    netns_mounts_under_state_dir = true")
	w("    [plugins.'io.containerd.grpc.v1.cri'.containerd]")
	w("      snapshotter = 'overlayfs'")
	w("      default_runtime_name = 'runc'")
	w("      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]")
	w("        runtime_type = 'io.containerd.runc.v2'")
	w("        [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]")
	w("          BinaryName = %s", q(c.Runc))
	w("          Root = %s", q(l.RuncRoot))
	writeRunscRuntime(w, "'io.containerd.grpc.v1.cri'", c)
	w("    [plugins.'io.containerd.grpc.v1.cri'.cni]")
	w("      bin_dir = %s", q(c.CNIBinDir))
	w("      conf_dir = %s", q(c.CNIConfDir))
	w("      max_conf_num = 1")
	w("    [plugins.'io.containerd.grpc.v1.cri'.registry]")
	w("      config_path = %s", q(c.RegistryConfigPath))
}

// writeRunscRuntime adds the runsc handler under the plugin's containerd.runtimes, with
// the options containerd's CRI plugin hands to a shim other than runc's: a type URL and
// the path of the shim's own config file.
func writeRunscRuntime(w func(string, ...any), plugin string, c *criConfig) {
	if c.RunscConfigPath == "" {
		return
	}
	q := strconv.Quote
	w("      [plugins.%s.containerd.runtimes.%s]", plugin, RunscHandler)
	w("        runtime_type = %s", q(RunscRuntimeType))
	w("        [plugins.%s.containerd.runtimes.%s.options]", plugin, RunscHandler)
	w("          TypeUrl = %s", q(RunscRuntimeType+".options"))
	w("          ConfigPath = %s", q(c.RunscConfigPath))
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
