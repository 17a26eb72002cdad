// Command shimd is a Kubernetes CRI runtime server on containerd, runc and CNI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/nri"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/runtime"
	"github.com/shimd/shimd/sandbox"
	"github.com/shimd/shimd/sandbox/pause"
	"github.com/shimd/shimd/stats"
	"github.com/shimd/shimd/taskevents"
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

type wiring struct {
	sandboxes  *sandbox.Manager
	containers *container.Manager
	runtime    *runtime.Service
	images     *image.Service
	nri        *nri.NRI // nil: NRI is off
	events     *taskevents.Monitor
	stopCDI    func() // ends the CDI spec dirs' watch
	// cleanups are the cleanups that failed, retried until they succeed.
	cleanups *cleanup.Queue
}

// The runtime service and the container manager reach sandboxes only through their
// interfaces.
var (
	_ runtime.PodSandboxes = (*sandbox.Manager)(nil)
	_ container.Pods       = (*sandbox.Manager)(nil)
	_ stats.Containers     = (*container.Manager)(nil)
)

// wire builds the services from the config.
func wire(cfg Config, cl *client.Client, cni *network.CNI, m *metrics) (wiring, error) {
	hs, err := handlersOf(cfg)
	if err != nil {
		return wiring{}, err
	}
	handlerSet := hs.set
	images := image.New(image.Options{
		Client: cl, Snapshotters: hs.snapshotters, RegistryConfigPath: cfg.Registry.ConfigPath, ContainerFsDir: cfg.ContainerFsDir,
		NoProgressTimeout: time.Duration(cfg.Registry.PullProgressTimeout), PinnedLabel: pause.PinnedLabel,
		UnpackLayers: cfg.Registry.UnpackLayers,
		PullObserver: m.observePull,
	})
	pauseRef, pauseImages := pauseImage(cfg, cl, images)
	images.Pin(pauseRef)
	pauseRootfs := ""
	if cfg.Sandbox.Image == "" {
		// The built-in image's files are known here: its pause containers run from
		// one read-only copy of them instead of a snapshot each.
		if pauseRootfs, err = pause.WriteRootfs(filepath.Join(cfg.RootDir, "pause-rootfs")); err != nil {
			return wiring{}, err
		}
	}
	// Nothing gets a lower oom_score_adj than shimd's own (lowering it needs
	// CAP_SYS_RESOURCE, which some nodes lack: docs/operating.md).
	minOOM := sandbox.OwnOOMScoreAdj(os.ReadFile)
	cleanups := cleanup.New()
	labels, seNode := selinuxNode(cfg.EnableSELinux)
	sandboxes := sandbox.NewManager(sandbox.Options{
		Client: cl, ContainerdAddress: cfg.Containerd.Address, Namespace: cfg.Containerd.Namespace,
		RootDir: cfg.RootDir, StateDir: cfg.StateDir, CgroupDriver: cfg.CgroupDriver, Handlers: handlerSet,
		Network: cni, PauseImage: pauseImages, PauseImageRef: pauseRef, PauseWhenNeeded: cfg.Sandbox.Pause == "when-needed",
		PauseRootfs: pauseRootfs, MinOOMScoreAdj: minOOM, Cleanups: cleanups, Labels: labels,
	})
	cfgJSON, err := cfg.JSON()
	if err != nil {
		return wiring{}, err
	}
	cdiRegistry, stopCDI, err := newCDI(cfg.CDI)
	if err != nil {
		return wiring{}, err
	}
	var containers *container.Manager
	plugins, err := newNRI(cfg.NRI, cdiRegistry, func() *container.Manager { return containers })
	if err != nil {
		stopCDI()
		return wiring{}, err
	}
	node := nodeInfo(hs.featureBins)
	node.SELinux = seNode
	containers = container.New(container.Options{
		Client: cl, Pods: sandboxes, Handlers: handlerSet, Images: images,
		RootDir: cfg.RootDir, StateDir: cfg.StateDir, MinOOMScoreAdj: minOOM, CDI: cdiRegistry,
		Namespace: cfg.Containerd.Namespace, Node: node, CgroupDriver: cfg.CgroupDriver,
		Cleanups: cleanups, ContainerFsDir: cfg.ContainerFsDir, Labels: labels,
		RejectAbsentMountSources: cfg.RejectAbsentMountSources,
	})
	collector := stats.New(stats.Options{
		Client: cl, Containers: containers, Images: images, Handlers: handlerSet, CgroupDriver: cfg.CgroupDriver,
	})
	rs := runtime.New(runtime.Options{
		Containerd: cl, Sandboxes: sandboxes, Containers: containers, Stats: collector, Network: cni,
		Handlers: handlerSet, Node: containers.Node(), HandlerNames: hs.names,
		Version: runtimeVersion(version), ConfigJSON: cfgJSON, PauseImage: pauseRef, CgroupDriver: cfg.CgroupDriver,
		EventedPLEGStatus: cfg.EventedPLEGStatus,
	})
	w := wiring{sandboxes: sandboxes, containers: containers, runtime: rs, images: images, stopCDI: stopCDI, cleanups: cleanups}
	w.events = eventMonitor(cl, cfg.Containerd.Namespace, w)
	if plugins != nil {
		containers.NRI().SetPlugins(plugins)
		w.nri = plugins
	}
	return w, nil
}

// handlers are the config's runtime handlers and what each needs.
type handlers struct {
	set pod.Handlers
	// snapshotters: each handler's snapshotter by its name; "": the default handler's.
	snapshotters map[string]string
	// featureBins: the binary that tells each handler's OCI runtime's features ("": none).
	featureBins map[string]string
	names       []string // sorted
}

// handlersOf reads the runtime handlers of cfg.
func handlersOf(cfg Config) (handlers, error) {
	hs := handlers{
		set:          pod.Handlers{ByName: map[string]pod.Handler{}, Default: cfg.DefaultRuntime},
		snapshotters: map[string]string{"": cfg.Containerd.Snapshotter},
		featureBins:  map[string]string{},
	}
	for name, rc := range cfg.Runtimes {
		rt, err := handlerRuntime(cfg, name, rc)
		if err != nil {
			return handlers{}, err
		}
		hs.set.ByName[name] = rt
		hs.snapshotters[name] = rt.Snapshotter
		hs.featureBins[name] = featuresBinary(rc, rt)
		hs.names = append(hs.names, name)
	}
	sort.Strings(hs.names)
	hs.snapshotters[""] = hs.snapshotters[cfg.DefaultRuntime]
	return hs, nil
}

// eventMonitor makes the one event monitor for all tasks. A pause process's exit
// makes its sandbox NOTREADY before the runtime service publishes it; after a
// resubscription the sandboxes are re-read first, then the containers, then leftovers
// are swept and the leases that could not be deleted while containerd was away are
// deleted.
func eventMonitor(cl *client.Client, namespace string, w wiring) *taskevents.Monitor {
	sandboxes, containers, images := w.sandboxes, w.containers, w.images
	deleteAbandonedLeases := func(ctx context.Context) { image.DeleteAbandonedLeases(ctx, cl.LeasesService()) }
	return taskevents.New(taskevents.Options{
		Events: cl, Namespace: namespace,
		Exit:   []taskevents.ExitHandler{sandboxes.TaskExit, containers.Exits().TaskExit},
		OOM:    []taskevents.OOMHandler{containers.Exits().TaskOOM},
		Delete: []taskevents.DeleteHandler{containers.Exits().TaskDelete},
		Resync: []func(context.Context){sandboxes.Resync, containers.Exits().Resync, sandboxes.SweepLive, deleteAbandonedLeases},
		Images: []func(){images.ImagesChanged},
		Live:   []func(bool){images.EventsLive, containers.Exits().Live},
	})
}

// nodeInfo reads what containers' specs depend on about this node and the features
// of each handler's OCI runtime (featureBins: handler -> binary, "" for none).
func nodeInfo(featureBins map[string]string) container.NodeInfo {
	caps, err := cap.Current()
	if err != nil {
		log.L.WithError(err).Warn("read capability bounding set")
	}
	unified := cgroups.Mode() == cgroups.Unified
	hugetlb := false
	if unified {
		data, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		hugetlb = strings.Contains(string(data), "hugetlb")
	} else if _, err := os.Stat("/sys/fs/cgroup/hugetlb"); err == nil {
		hugetlb = true
	}
	aa, aaDefault := appArmorNode()
	return container.NodeInfo{Capabilities: caps, UnifiedCgroups: unified, HugetlbController: hugetlb,
		AppArmor: aa, AppArmorDefault: aaDefault, Handlers: runtimeFeatures(context.Background(), featureBins)}
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
