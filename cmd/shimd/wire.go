package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/log"
	"github.com/moby/sys/userns"

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

// Step 3 of serve: the services built from the config and wired to each other.

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
	verifier, err := imageVerifier(cfg.Registry)
	if err != nil {
		return wiring{}, err
	}
	images := image.New(image.Options{
		Client: cl, Snapshotters: hs.snapshotters, RegistryConfigPath: cfg.Registry.ConfigPath, ContainerFsDir: cfg.ContainerFsDir,
		NoProgressTimeout: time.Duration(cfg.Registry.PullProgressTimeout), PinnedLabel: pause.PinnedLabel,
		UnpackLayers: cfg.Registry.UnpackLayers,
		PullObserver: m.observePull, Verifier: verifier,
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
		Sysctls: pod.SysctlDefaults{UnprivilegedPorts: cfg.EnableUnprivilegedPorts, UnprivilegedICMP: cfg.EnableUnprivilegedICMP,
			InUserNS: userns.RunningInUserNS()},
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
		RejectAbsentMountSources: cfg.RejectAbsentMountSources, DeviceOwnershipFromSecurityContext: cfg.DeviceOwnershipFromSecurityContext,
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
