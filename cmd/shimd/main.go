// Command shimd is a Kubernetes CRI runtime server on containerd, runc and CNI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"

	"github.com/shimd/shimd/network"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "config" && os.Args[2] == "default" {
		out, err := defaultConfigText(len(os.Args) > 3 && os.Args[3] == "--commented")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(out)
		return
	}
	cfg, err := configFromFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shimd:", err)
		os.Exit(2)
	}
	if cfg == nil {
		return // --version
	}
	tuneGoRuntime()
	if err := run(*cfg); err != nil {
		log.L.WithError(err).Error("shimd exited")
		os.Exit(1)
	}
}

// configFromFlags loads the config file and applies flag overrides.
func configFromFlags(args []string) (*Config, error) {
	fs := flag.NewFlagSet("shimd", flag.ContinueOnError)
	path := fs.String("config", "/etc/shimd/config.toml", "config file (TOML); missing default file = all defaults")
	showVersion := fs.Bool("version", false, "print the version and exit")
	socket := fs.String("socket", "", "CRI socket path (overrides socket)")
	address := fs.String("containerd-address", "", "containerd socket (overrides containerd.address)")
	level := fs.String("log-level", "", "log level (overrides log_level)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), usageTail)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		fmt.Printf("shimd %s\n", version)
		return nil, nil
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	cfg, err := LoadConfig(*path, explicit)
	if err != nil {
		return nil, err
	}
	if *socket != "" {
		cfg.Socket = *socket
	}
	if *address != "" {
		cfg.Containerd.Address = *address
	}
	if *level != "" {
		cfg.LogLevel = *level
	}
	return &cfg, cfg.Validate()
}

func run(cfg Config) error {
	if err := log.SetLevel(cfg.LogLevel); err != nil {
		return err
	}
	if err := log.SetFormat(log.TextFormat); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dumpStacksOnSIGUSR1(ctx, os.Stderr)
	return serve(ctx, cfg, func(time.Duration) { notifySystemd(ctx, sdReady) })
}

// serve runs the daemon until ctx ends, then shuts it down; ready is called once
// recovery is done. Everything it starts has an owner here and is stopped, and waited
// for, before serve returns (the deferred calls, in reverse order of the steps):
//
//  1. directories (root_dir, state_dir, cni.cache_dir), then the containerd client:
//     both only fail on configuration, so they fail first, naming the key.
//     Connecting does not wait for containerd: recovery (step 6) does.
//  2. metrics and the CNI config loader: the services report into the first and
//     read the second from the start.
//  3. the services (wire): images, sandboxes, runtime. Nothing runs yet.
//  4. the streaming, debug and metrics endpoints: the streaming server's URL must
//     be known before any Exec/Attach/PortForward is answered. Stopped after the
//     CRI server, so that no RPC hands out a dead URL.
//  5. the CRI socket: a socket that cannot be had fails start-up before any
//     background work is started.
//  6. background work, started together: the event monitor (package taskevents),
//     recovery (images, sandboxes, containers, then the sweep of leftover shims and
//     cgroups; retried until containerd answers), the retries of failed cleanups
//     (package cleanup) and the cni.conf_dir watch. Until
//     recovery is done the CRI server answers Unavailable (but Version). After every
//     (re)subscription the monitor re-reads the sandboxes' and containers' tasks,
//     and sweeps leftovers once recovery has swept.
//  7. the CRI server, until ctx ends; then in-flight calls finish (30s at most).
//
// Shutdown, after 7: the background work of 6 is cancelled and waited for; the
// endpoints of 4 stop (ending open streams); the services wait for their own
// goroutines (a RunPodSandbox recipe whose caller gave up, exits being recorded) and
// stop copying running containers' output; the containerd client closes last.
func serve(ctx context.Context, cfg Config, ready func(time.Duration)) error {
	ctx = namespaces.WithNamespace(ctx, cfg.Containerd.Namespace)

	// 1.
	if err := prepareHost(ctx, cfg); err != nil {
		return err
	}
	cl, err := newContainerdClient(cfg.Containerd)
	if err != nil {
		return fmt.Errorf("config key containerd.address: containerd client for %s: %w", cfg.Containerd.Address, err)
	}
	defer cl.Close()

	// 2.
	m := newMetrics()
	cni, err := network.NewCNI(network.Options{ConfDir: cfg.CNI.ConfDir, BinDirs: cfg.CNI.BinDirs, CacheDir: cfg.CNI.CacheDir, Observer: m.observeCNI})
	if err != nil {
		return err
	}
	// 3.
	w, err := wire(cfg, cl, cni, m)
	if err != nil {
		return err
	}
	m.watchCleanups(w.cleanups)
	defer w.stopCDI()
	defer w.containers.Close()
	defer w.sandboxes.Close()
	m.reg.MustRegister(newStateCollector(w.runtime, cl.IsServing))
	// 4.
	for _, start := range []func() (func(), error){
		func() (func(), error) { return startStreaming(ctx, cfg.Streaming, w.runtime) },
		func() (func(), error) { return startDebug(ctx, cfg.Debug) },
		func() (func(), error) { return startMetrics(ctx, cfg.Metrics.Address, m) },
	} {
		stopIt, err := start()
		if err != nil {
			return err
		}
		defer stopIt()
	}
	// 5.
	l, err := listenCRI(cfg.Socket)
	if err != nil {
		return fmt.Errorf("config key socket: %w", err)
	}
	defer os.Remove(cfg.Socket)
	var isReady atomic.Bool
	srv := newGRPCServer(&isReady, m, w.runtime, w.images)

	if w.nri != nil {
		defer w.nri.Stop() // after the background work of 6 has stopped
	}
	// 6.: cancelled and waited for before the services close.
	bgCtx, cancelBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { cancelBg(); bg.Wait() }()
	bg.Go(func() { w.events.Run(bgCtx) })
	bg.Go(func() {
		recoverUntilDone(bgCtx, func(d time.Duration) {
			startNRI(ctx, w.nri) // plugins synchronize with the recovered pods
			isReady.Store(true)
			m.recovery.Set(d.Seconds())
			ready(d)
		}, w.images.Recover, w.sandboxes.Recover, w.containers.Recover, w.sandboxes.Sweep)
	})
	bg.Go(func() { w.cleanups.Run(bgCtx) })
	bg.Go(func() {
		if err := cni.Watch(bgCtx, 200*time.Millisecond); err != nil {
			log.G(ctx).WithError(err).Warn("not watching cni.conf_dir; restart shimd to pick up network config changes")
		}
	})
	// 7.
	log.G(ctx).WithField("socket", cfg.Socket).WithField("version", version).Info("shimd serving")
	return serveUntil(ctx, srv, l, 30*time.Second)
}

// prepareHost checks the host against the config and makes shimd's directories.
func prepareHost(ctx context.Context, cfg Config) error {
	if err := checkCgroupDriverHost(cfg.CgroupDriver); err != nil {
		return err
	}
	if cfg.SweepInterval != 0 {
		log.G(ctx).Warn("config key sweep_interval is no longer used and is ignored: shimd retries each failed cleanup until it succeeds")
	}
	dirs := map[string]string{"root_dir": cfg.RootDir, "state_dir": cfg.StateDir, "cni.cache_dir": cfg.CNI.CacheDir}
	if cfg.ContainerFsDir != "" {
		dirs["container_fs_dir"] = cfg.ContainerFsDir
	}
	for _, k := range sortedKeys(dirs) {
		if err := os.MkdirAll(dirs[k], 0o711); err != nil {
			return fmt.Errorf("config key %s: create %s: %w (choose a writable directory)", k, dirs[k], err)
		}
	}
	return nil
}

// recoverUntilDone runs the recovery steps (images, sandboxes, then containers),
// retrying until containerd answers, then calls done with the duration of the run that
// succeeded. Until then every RPC but Version gets Unavailable.
func recoverUntilDone(ctx context.Context, done func(time.Duration), steps ...func(context.Context) error) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		var err error
		for _, step := range steps {
			if err = step(ctx); err != nil {
				break
			}
		}
		if err == nil {
			d := time.Since(start)
			log.G(ctx).WithField("duration", d.String()).Info("recovery done")
			done(d)
			return
		}
		log.G(ctx).WithError(err).Warn("recovery failed; retrying (does containerd answer on config key containerd.address?)")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}
