package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// DefaultSandboxImage is the pause image containerd's own CRI plugin uses
// when ContainerdOptions.WithCRI is set.
const DefaultSandboxImage = "registry.k8s.io/pause:3.10"

// readyTimeout bounds how long a daemon may take to answer its socket.
const readyTimeout = 30 * time.Second

// ContainerdOptions configures StartContainerd. The zero value starts the
// containerd chosen by Tools with its CRI plugins and NRI disabled.
type ContainerdOptions struct {
	// Dir is the directory for the daemon's config, log, root, state and
	// sockets. Empty: a new base directory (see NewBaseDir). Keep it short.
	Dir string
	// Namespace is the default namespace of Client (and of the leak check). Empty:
	// "shimd-" and 6 random hex digits, so that the cgroups of concurrent runs never meet.
	Namespace string
	// LogLevel of the daemon. Empty: "debug".
	LogLevel string

	// WithCRI enables containerd's own CRI plugin (for comparisons), with
	// its own CNI conf dir, /usr/lib/cni, the chosen runc, a private runc
	// root, restrict_oom_score_adj and network namespaces under the state
	// dir. Its CRI socket is the containerd socket.
	WithCRI bool
	// CNIConfDir for the CRI plugin. Empty: <Dir>/net.d (write a network
	// there with WriteCNIConfig).
	CNIConfDir string
	// SandboxImage for the CRI plugin. Empty: DefaultSandboxImage.
	SandboxImage string
	// RegistryConfigPath is the CRI plugin's registry config_path (a
	// certs.d-style directory of hosts.toml files). Empty: none.
	RegistryConfigPath string

	// Runsc adds the runtime handler "runsc" (gVisor, RunscRuntimeType, platform
	// systrap; see WriteRunscConfig) to the CRI plugin. Needs WithCRI.
	Runsc bool
	// CRIStatsCollectPeriod is the CRI plugin's stats_collect_period (containerd 2.x:
	// how often it samples every container's and pod's CPU for usage_nano_cores; a
	// Go duration, default "1s"). Empty: the plugin's default. Needs WithCRI.
	CRIStatsCollectPeriod string
	// CRIImagePullProgressTimeout is the CRI plugin's image_pull_progress_timeout
	// (containerd 2.x; a Go duration, default "5m"). Empty: the default. Needs WithCRI.
	CRIImagePullProgressTimeout string

	// ExtraConfig is raw TOML appended to config.toml, after the plugin
	// tables: start it with a table header. It must use the config version
	// of the binary (3 for 2.x, 2 for 1.6; see MajorVersion) and must not
	// repeat a table the harness writes (see ConfigPath).
	ExtraConfig string

	// Wrap is a command line containerd runs under, such as "nsenter -t PID -m
	// -u -n --" for a daemon inside a node's namespaces (critest/kubeadm); it
	// must exec containerd in place, so that the PID stays containerd's.
	Wrap []string
}

// Containerd is a containerd daemon started by the harness.
type Containerd struct {
	tools   Toolset
	layout  containerdLayout
	ns      string
	major   int
	proc    *daemon
	cfgPath string
}

// StartContainerd writes a private config and starts containerd, waits until
// its socket answers Version, and registers a cleanup that deletes every
// remaining task and container, then stops the daemon (SIGTERM, SIGKILL after
// 10s).
func StartContainerd(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	tools := Tools()
	tools.Require(t, tools.Containerd, tools.Shim)
	ver, err := containerdVersion(tools.Containerd)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	dir := opts.Dir
	if dir == "" {
		dir = NewBaseDir(t)
	}
	l := newContainerdLayout(dir)
	if ver.Major >= 2 && len(l.ShimSocks) > 42 {
		t.Fatalf("harness: shim socket dir %s is longer than 42 bytes; use a shorter Dir", l.ShimSocks)
	}
	for _, d := range []string{l.Root, l.State} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	var cri *criConfig
	if opts.WithCRI {
		tools.Require(t, tools.Runc)
		cri = &criConfig{
			CNIConfDir:          or(opts.CNIConfDir, filepath.Join(dir, "net.d")),
			CNIBinDir:           CNIBinDir,
			Runc:                tools.Runc,
			SandboxImage:        or(opts.SandboxImage, DefaultSandboxImage),
			RegistryConfigPath:  opts.RegistryConfigPath,
			StatsCollectPeriod:  opts.CRIStatsCollectPeriod,
			PullProgressTimeout: opts.CRIImagePullProgressTimeout,
		}
		if opts.Runsc {
			cri.RunscConfigPath = WriteRunscConfig(t, dir)
		}
		if err := os.MkdirAll(cri.CNIConfDir, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	cfg := containerdConfig(ver.Major, l, or(opts.LogLevel, "debug"), cri, opts.ExtraConfig)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	c := &Containerd{
		tools:   tools,
		layout:  l,
		ns:      or(opts.Namespace, "shimd-"+randHex(3)),
		major:   ver.Major,
		cfgPath: cfgPath,
		proc: &daemon{
			name:    "containerd " + ver.Raw,
			path:    tools.Containerd,
			args:    []string{"--config", cfgPath},
			env:     daemonEnv(tools.BinDir + ":" + filepath.Dir(tools.RunscShim)),
			logPath: filepath.Join(dir, "containerd.log"),
			wrap:    opts.Wrap,
		},
	}
	c.proc.logOnFailure(t)
	// After the shutdown: the namespace's parent cgroups (/<namespace>), left empty.
	t.Cleanup(func() { removeNamespaceCgroups(c.ns) })
	t.Cleanup(func() { c.shutdown(t) })
	c.Restart(t)
	return c
}

// daemonEnv is the environment with binDir first in PATH.
func daemonEnv(binDir string) []string {
	env := []string{}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range os.Environ() {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+binDir+":"+path)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Address is the containerd gRPC socket path (also its CRI socket when WithCRI).
func (c *Containerd) Address() string { return c.layout.Address }

// DebugAddress is the daemon's debug socket, which serves Go's /debug/pprof/
// (CPU, heap, goroutine profiles) and /debug/vars.
func (c *Containerd) DebugAddress() string { return c.layout.Debug }

// Namespace is the default namespace of Client.
func (c *Containerd) Namespace() string { return c.ns }

// Dir is the directory holding config.toml, the log, root and state.
func (c *Containerd) Dir() string { return c.layout.Dir }

// Root is containerd's root directory.
func (c *Containerd) Root() string { return c.layout.Root }

// State is containerd's state directory.
func (c *Containerd) State() string { return c.layout.State }

// ConfigPath is the config.toml the daemon runs with.
func (c *Containerd) ConfigPath() string { return c.cfgPath }

// LogPath is the daemon's log file (appended to across restarts).
func (c *Containerd) LogPath() string { return c.proc.logPath }

// MajorVersion is 2 for containerd 2.x, 1 for 1.6.
func (c *Containerd) MajorVersion() int { return c.major }

// PID of the running daemon, or 0.
func (c *Containerd) PID() int { return c.proc.pid() }

// Stop sends SIGTERM and waits; SIGKILL after 10s.
func (c *Containerd) Stop() { c.proc.stop() }

// Kill sends SIGKILL and waits.
func (c *Containerd) Kill() { c.proc.kill() }

// SetWrap changes ContainerdOptions.Wrap from the next start (namespaces made
// again, as critest/kubeadm's node reboot makes them).
func (c *Containerd) SetWrap(wrap []string) { c.proc.setWrap(wrap) }

// Restart stops the daemon if it runs and starts it again with the same
// config and directories, then waits until it answers. Shims keep running
// across the restart, as they do in production.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	c.proc.stop()
	if err := c.startAndWait(); err != nil {
		t.Fatalf("harness: %v", err)
	}
}

// startAndWait starts the daemon and waits until it answers.
func (c *Containerd) startAndWait() error {
	if err := c.proc.start(); err != nil {
		return err
	}
	return c.proc.waitReady(readyTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.version(ctx)
		return err
	})
}

func (c *Containerd) version(ctx context.Context) (client.Version, error) {
	cl, err := client.New(c.layout.Address, client.WithTimeout(2*time.Second))
	if err != nil {
		return client.Version{}, err
	}
	defer cl.Close()
	return cl.Version(ctx)
}

// Client returns a client for the daemon with Namespace as its default
// namespace, closed at the end of the test.
func (c *Containerd) Client(t testing.TB) *client.Client {
	t.Helper()
	cl, err := client.New(c.layout.Address, client.WithDefaultNamespace(c.ns), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("harness: containerd client: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// shutdown deletes every task and container left in any namespace (the
// leak check has already reported them), so no shim outlives the test,
// then stops the daemon.
func (c *Containerd) shutdown(t testing.TB) {
	if c.proc.pid() == 0 && c.proc.started() {
		// The test ended while containerd was down: it killed containerd and failed
		// before starting it again. Its shims, and the containers in them, would
		// outlive the test. containerd, started again, finds them for the purge.
		if err := c.startAndWait(); err != nil {
			t.Logf("harness: starting containerd again to clean up: %v", err)
		}
	}
	if c.proc.pid() != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := c.purge(ctx); err != nil {
			t.Logf("harness: cleaning up containerd: %v", err)
		}
		cancel()
	}
	if c.proc.stop() {
		t.Logf("harness: %s needed SIGKILL to stop", c.proc.name)
	}
}

// purge kills and deletes every task and container in every namespace.
func (c *Containerd) purge(ctx context.Context) error {
	cl, err := client.New(c.layout.Address, client.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	nss, err := cl.NamespaceService().List(ctx)
	if err != nil {
		return err
	}
	var firstErr error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := cl.Containers(nctx)
		if err != nil {
			return err
		}
		for _, ctr := range ctrs {
			if err := deleteContainer(nctx, ctr); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("namespace %s: %w", ns, err)
			}
		}
	}
	return firstErr
}

func deleteContainer(ctx context.Context, ctr client.Container) error {
	if task, err := ctr.Task(ctx, nil); err == nil {
		if st, err := task.Status(ctx); err == nil && st.Status != client.Stopped {
			wait, werr := task.Wait(ctx)
			if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err == nil && werr == nil {
				select {
				case <-wait:
				case <-time.After(10 * time.Second):
				}
			}
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
			return fmt.Errorf("delete task %s: %w", ctr.ID(), err)
		}
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		return fmt.Errorf("delete container %s: %w", ctr.ID(), err)
	}
	return nil
}
