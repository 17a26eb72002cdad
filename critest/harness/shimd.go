package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ShimdOptions configures StartShimd.
type ShimdOptions struct {
	// ContainerdAddress is the socket of the containerd shimd uses. Required.
	ContainerdAddress string
	// Dir holds the config, log, socket, root, state and CNI dirs. Empty: a
	// new base directory (see NewBaseDir).
	Dir string
	// Runc is the runc binary. Empty: Tools().Runc.
	Runc string
	// RuntimeType of [runtimes.runc]. Empty: io.containerd.runc.v2. An absolute
	// path names the shim binary itself (containerd runs it as given).
	RuntimeType string
	// RuncRoot, if set, is written as [runtimes.runc] root (runc --root).
	// Empty: the key is left out and shimd uses its default.
	RuncRoot string
	// ExtraConfig is raw TOML placed after the top-level keys and before the
	// [containerd] table: top-level keys and new tables both work. It must not
	// repeat a key or table the harness writes, except [cdi] and [nri]: with one
	// there, the harness leaves out its own (a private spec dir, CDISpecDir; a
	// private socket and plugin dir, NRISocket and NRIPluginDir).
	ExtraConfig string
	// NoCNIConfig leaves the CNI conf dir empty (for NetworkReady=false
	// tests). StartShimd never writes a network itself; New honours this.
	NoCNIConfig bool
	// CNIBinDirs are searched for CNI plugins before CNIBinDir.
	CNIBinDirs []string
	// Namespace is shimd's containerd namespace. Empty: "shimd". New gives
	// every Env its own, so that cgroups (/<namespace>/<id>) of concurrent
	// test runs never meet.
	Namespace string
	// Env is added to shimd's environment (e.g. NOTIFY_SOCKET=...).
	Env []string
	// LogLevel of shimd. Empty: "debug".
	LogLevel string
	// Runsc adds the runtime handler "runsc" (gVisor: RunscRuntimeType with the
	// options file of WriteRunscConfig, platform systrap). See SkipWithoutRunsc.
	Runsc bool
	// Pause is sandbox.pause ("always" or "when-needed"). Empty: $SHIMD_PAUSE, so that
	// whole suites run in either mode; unset, the key is left out (shimd's default,
	// "when-needed").
	Pause string
	// NRIRequestTimeout is nri.plugin_request_timeout. Zero: the key is left out
	// (shimd's default, 2 s).
	NRIRequestTimeout time.Duration
	// Wrap is a command line shimd runs under (see ContainerdOptions.Wrap).
	Wrap []string
}

// PauseMode is the sandbox.pause a test environment gets when its ShimdOptions.Pause
// is empty: $SHIMD_PAUSE, or "" (shimd's default).
func PauseMode() string { return os.Getenv("SHIMD_PAUSE") }

// Shimd is a shimd daemon started by the harness.
type Shimd struct {
	dir     string
	ns      string
	pause   string
	cfgPath string
	proc    *daemon
	crictl  string
}

// StartShimd writes shimd's config and starts "shimd --config <file>" (the
// binary from SHIMD_BIN, or built once per test binary from ./cmd/shimd),
// waits up to 30s until its CRI socket answers Version, and registers a
// cleanup that stops it (SIGTERM, SIGKILL after 10s).
func StartShimd(t testing.TB, opts ShimdOptions) *Shimd {
	t.Helper()
	if opts.ContainerdAddress == "" {
		t.Fatal("harness: ShimdOptions.ContainerdAddress is required")
	}
	tools := Tools()
	runc := or(opts.Runc, tools.Runc)
	tools.Require(t, runc)
	bin, err := shimdBinary()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	dir := opts.Dir
	if dir == "" {
		dir = NewBaseDir(t)
	}
	s := &Shimd{dir: dir, ns: or(opts.Namespace, "shimd"), pause: or(opts.Pause, PauseMode()), cfgPath: filepath.Join(dir, "shimd.toml"), crictl: tools.Crictl}
	for _, d := range []string{s.CNIConfDir(), s.CNICacheDir(), s.CDISpecDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if len(s.Socket()) > 100 {
		t.Fatalf("harness: socket path %s is too long for a unix socket", s.Socket())
	}
	extra := opts.ExtraConfig
	if s.pause != "" {
		if strings.Contains(extra, "[sandbox]") {
			extra = strings.Replace(extra, "[sandbox]", "[sandbox]\npause = "+strconv.Quote(s.pause), 1)
		} else {
			extra += "\n[sandbox]\npause = " + strconv.Quote(s.pause) + "\n"
		}
	}
	cfg := shimdConfig(s, opts.ContainerdAddress, runc, opts.RuncRoot, or(opts.LogLevel, "debug"), extra, opts.CNIBinDirs...)
	if opts.RuntimeType != "" {
		cfg = strings.Replace(cfg, strconv.Quote("io.containerd.runc.v2"), strconv.Quote(opts.RuntimeType), 1)
	}
	if opts.NRIRequestTimeout > 0 {
		cfg = strings.Replace(cfg, "[nri]\n", "[nri]\nplugin_request_timeout = "+strconv.Quote(opts.NRIRequestTimeout.String())+"\n", 1)
	}
	if opts.Runsc {
		cfg += fmt.Sprintf("\n[runtimes.%s]\ntype = %s\nconfig_path = %s\n", RunscHandler,
			strconv.Quote(RunscRuntimeType), strconv.Quote(WriteRunscConfig(t, dir)))
	}
	if err := os.WriteFile(s.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	crictlCfg := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", s.Endpoint(), s.Endpoint())
	if err := os.WriteFile(filepath.Join(dir, "crictl.yaml"), []byte(crictlCfg), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	s.proc = &daemon{
		name:    "shimd",
		path:    bin,
		args:    []string{"--config", s.cfgPath},
		env:     append(daemonEnv(tools.BinDir), opts.Env...),
		logPath: filepath.Join(dir, "shimd.log"),
		wrap:    opts.Wrap,
	}
	s.proc.logOnFailure(t)
	showLog(t, "shimd", s.proc.logPath)
	t.Cleanup(func() {
		if s.proc.stop() {
			t.Logf("harness: shimd needed SIGKILL to stop")
		}
	})
	s.Start(t)
	return s
}

// shimdConfig renders the TOML file shimd reads. shimd rejects unknown keys.
func shimdConfig(s *Shimd, containerdAddr, runc, runcRoot, logLevel, extra string, cniBinDirs ...string) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "socket = %s\n", q(s.Socket()))
	fmt.Fprintf(&b, "root_dir = %s\n", q(s.RootDir()))
	fmt.Fprintf(&b, "state_dir = %s\n", q(s.StateDir()))
	fmt.Fprintf(&b, "log_level = %s\n", q(logLevel))
	if extra != "" {
		fmt.Fprintf(&b, "\n%s\n\n", strings.TrimSpace(extra))
	}
	fmt.Fprintf(&b, "[containerd]\naddress = %s\nnamespace = %s\n\n", q(containerdAddr), q(s.ns))
	var bins []string
	for _, d := range append(cniBinDirs, CNIBinDir) {
		bins = append(bins, q(d))
	}
	fmt.Fprintf(&b, "[cni]\nconf_dir = %s\nbin_dirs = [%s]\ncache_dir = %s\n\n",
		q(s.CNIConfDir()), strings.Join(bins, ", "), q(s.CNICacheDir()))
	if !strings.Contains(extra, "[nri]") {
		// Never the host's NRI socket or plugins: private, initially empty ones.
		fmt.Fprintf(&b, "[nri]\nsocket_path = %s\nplugin_path = %s\nplugin_config_path = %s\n\n",
			q(s.NRISocket()), q(s.NRIPluginDir()), q(s.NRIConfigDir()))
	}
	if !strings.Contains(extra, "[cdi]") {
		// Never the host's /etc/cdi: a private, initially empty spec dir.
		fmt.Fprintf(&b, "[cdi]\nspec_dirs = [%s]\n\n", q(s.CDISpecDir()))
	}
	fmt.Fprintf(&b, "[runtimes.runc]\ntype = %s\nbinary_name = %s\n", q("io.containerd.runc.v2"), q(runc))
	if runcRoot != "" {
		fmt.Fprintf(&b, "root = %s\n", q(runcRoot))
	}
	return b.String()
}

// Socket is the CRI socket path.
func (s *Shimd) Socket() string { return filepath.Join(s.dir, "shimd.sock") }

// Endpoint is the CRI endpoint, "unix://" + Socket().
func (s *Shimd) Endpoint() string { return "unix://" + s.Socket() }

// RootDir is shimd's root_dir.
func (s *Shimd) RootDir() string { return filepath.Join(s.dir, "root") }

// StateDir is shimd's state_dir.
func (s *Shimd) StateDir() string { return filepath.Join(s.dir, "state") }

// NetnsDir is where shimd keeps network namespace files (<state_dir>/netns).
func (s *Shimd) NetnsDir() string { return filepath.Join(s.StateDir(), "netns") }

// PinDirs are where shimd pins the namespaces of pods: network, IPC and UTS
// (pause-less pods) and user namespaces.
func (s *Shimd) PinDirs() []string {
	var out []string
	for _, d := range []string{"netns", "ipcns", "utsns", "userns"} {
		out = append(out, filepath.Join(s.StateDir(), d))
	}
	return out
}

// Pause is the sandbox.pause this shimd runs with ("" = shimd's default, "when-needed").
func (s *Shimd) Pause() string { return s.pause }

// Namespace is shimd's containerd namespace.
func (s *Shimd) Namespace() string { return s.ns }

// CNIConfDir is the CNI conf_dir; write a network there with WriteCNIConfig.
func (s *Shimd) CNIConfDir() string { return filepath.Join(s.dir, "net.d") }

// CDISpecDir is shimd's only CDI spec directory (cdi.spec_dirs), empty at start,
// unless ShimdOptions.ExtraConfig has a [cdi] table of its own.
func (s *Shimd) CDISpecDir() string { return filepath.Join(s.dir, "cdi") }

// NRISocket is where NRI plugins connect to shimd (nri.socket_path), and
// NRIPluginDir the directory of plugins shimd starts (nri.plugin_path), unless
// ShimdOptions.ExtraConfig has an [nri] table of its own.
func (s *Shimd) NRISocket() string    { return filepath.Join(s.dir, "nri.sock") }
func (s *Shimd) NRIPluginDir() string { return filepath.Join(s.dir, "nri-plugins") }

// NRIConfigDir holds the configuration of the plugins in NRIPluginDir
// (nri.plugin_config_path): <idx>-<name>.conf.
func (s *Shimd) NRIConfigDir() string { return filepath.Join(s.dir, "nri-conf.d") }

// CNICacheDir is the CNI cache_dir.
func (s *Shimd) CNICacheDir() string { return filepath.Join(s.dir, "cni-cache") }

// ConfigPath is the TOML file shimd runs with.
func (s *Shimd) ConfigPath() string { return s.cfgPath }

// LogPath is shimd's log file (stdout and stderr, appended across restarts).
func (s *Shimd) LogPath() string { return s.proc.logPath }

// PID of the running daemon, or 0.
func (s *Shimd) PID() int { return s.proc.pid() }

// Start starts shimd with the same config (again, after Kill9 or Stop) and
// waits up to 30s until the CRI socket answers Version and recovery has finished
// (shimd answers other RPCs with Unavailable until then). containerd must be up.
func (s *Shimd) Start(t testing.TB) {
	t.Helper()
	s.start(t, true)
}

// StartUnrecovered is Start without waiting for recovery: for tests of what shimd
// does while it cannot recover (containerd down).
func (s *Shimd) StartUnrecovered(t testing.TB) {
	t.Helper()
	s.start(t, false)
}

func (s *Shimd) start(t testing.TB, recovered bool) {
	t.Helper()
	if err := s.proc.start(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	conn, err := s.dial()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	err = s.proc.waitReady(readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || !recovered {
			return err
		}
		_, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
}

// Stop sends SIGTERM and waits (SIGKILL after 10s).
func (s *Shimd) Stop() { s.proc.stop() }

// Kill9 sends SIGKILL and waits for the process to exit.
func (s *Shimd) Kill9() { s.proc.kill() }

// SetWrap changes ShimdOptions.Wrap from the next start (see Containerd.SetWrap).
func (s *Shimd) SetWrap(wrap []string) { s.proc.setWrap(wrap) }

func (s *Shimd) dial() (*grpc.ClientConn, error) {
	// Reconnect quickly: tests restart shimd and expect the same client to
	// work again within a second.
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 50*time.Millisecond, time.Second
	return grpc.NewClient(s.Endpoint(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
}

// Runtime returns a RuntimeService client, closed at the end of the test. It
// reconnects by itself across Kill9 and Start.
func (s *Shimd) Runtime(t testing.TB) runtimeapi.RuntimeServiceClient {
	t.Helper()
	return runtimeapi.NewRuntimeServiceClient(s.conn(t))
}

// Images returns an ImageService client, closed at the end of the test.
func (s *Shimd) Images(t testing.TB) runtimeapi.ImageServiceClient {
	t.Helper()
	return runtimeapi.NewImageServiceClient(s.conn(t))
}

func (s *Shimd) conn(t testing.TB) *grpc.ClientConn {
	conn, err := s.dial()
	if err != nil {
		t.Fatalf("harness: dial %s: %v", s.Endpoint(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// CrictlFlags point crictl at this shimd alone: its own config file (never the
// host's /etc/crictl.yaml, which `bash hack/run.sh` points at the system shimd) and
// both endpoints.
func (s *Shimd) CrictlFlags() []string {
	return []string{"--config", filepath.Join(s.dir, "crictl.yaml"), "--runtime-endpoint", s.Endpoint(), "--image-endpoint", s.Endpoint()}
}

// Crictl runs the tools' crictl against this shimd (runtime and image
// endpoints set, --timeout 60s) and returns its stdout. On failure err
// includes stderr.
func (s *Shimd) Crictl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	Tools().Require(t, s.crictl)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append(append(s.CrictlFlags(), "--timeout", "60s"), args...)
	cmd := exec.CommandContext(ctx, s.crictl, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
