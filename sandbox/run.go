package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/image-spec/identity"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// Run creates and starts a pod sandbox, announces it and returns its id.
//
// announce (nil: none) tells others (NRI plugins) of the pod once it is READY and
// before it is listed: while it runs, ListPodSandbox does not show the pod, its
// status is NotFound and no container can be created in it, as with containerd's
// CRI plugin. Its error refuses the pod: Run stops and removes it again and fails
// with that error. done, when not nil, is called once the pod is listed or removed.
//
// The name (pod name, namespace, uid, attempt) is reserved first. A second Run for the
// same name waits for the first and returns its sandbox: the kubelet retries a
// RunPodSandbox it timed out on, and must get the pod that was made, not an error.
// The work itself is detached from the caller's context, so a caller that gives up
// leaves either a whole pod (handed to its retry) or nothing.
func (m *Manager) Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string,
	announce func(ctx context.Context, p pod.Pod) (done func(), err error),
) (string, error) {
	rt, err := m.opts.Handlers.Get(handler)
	if err != nil {
		return "", err
	}
	name := pod.MakeName(cfg.GetMetadata())
	r, fresh := m.store.reserve(name)
	if fresh {
		m.runs.Go(func() { // outlives a caller that gives up; Close waits for it
			wctx, cancel := m.cleanupContext(ctx)
			defer cancel()
			sb := m.newSandbox(name, cfg, handler, rt)
			wctx = log.WithLogger(wctx, log.G(wctx).WithField("sandbox", sb.ID))
			// Until it is listed, the pause process's exit reaches sb through
			// m.running (TaskExit), and the live sweep leaves its record alone.
			m.running.Store(sb.ID, sb)
			err := m.run(wctx, sb, rt)
			var done func()
			if err == nil {
				done, err = m.announce(wctx, sb, announce)
			}
			m.store.finish(name, r, sb, err)
			m.running.Delete(sb.ID)
			if done != nil {
				done()
			}
		})
	}
	return r.wait(ctx)
}

// announce runs announce on sb, READY and not yet listed; if it refuses sb, sb is
// stopped and removed again (or left to the cleanup queue) and the refusal returned.
func (m *Manager) announce(ctx context.Context, sb *Sandbox, announce func(context.Context, pod.Pod) (func(), error)) (func(), error) {
	if announce == nil {
		return nil, nil
	}
	done, err := announce(ctx, m.facts(sb, sb.State()))
	if err == nil {
		return done, nil
	}
	if uerr := m.remove(ctx, sb); uerr != nil {
		log.G(ctx).WithError(uerr).Warn("undo pod refused when announced")
		m.destroyLater(sb)
	}
	return done, err
}

// newSandbox is a new sandbox of cfg, not yet made: its id, paths and mode.
func (m *Manager) newSandbox(name string, cfg *runtimeapi.PodSandboxConfig, handler string, rt pod.Handler) *Sandbox {
	sb := &Sandbox{
		ID: pod.NewID(), Name: name, Config: cfg, RuntimeHandler: handler,
		CreatedAt: time.Now(), state: pod.Ready,
	}
	if !sb.HostNetwork() {
		sb.NetNSPath = network.NetNSPath(m.fs.netnsDir(), sb.ID)
	}
	sb.Pauseless = m.pauseless(cfg, rt)
	// A pause that runs on the host's kernel with the node's user ids can share one
	// read-only root; a sandboxed runtime's or a user namespace's needs a snapshot,
	// and so does one under SELinux: the pod's process label may execute only files
	// of the container types, which the snapshot's are and the shared root's are not.
	sb.SharedRootfs = !sb.Pauseless && m.opts.PauseRootfs != "" && rt.PauseOptional && sb.UserNamespace() == nil &&
		!m.opts.Labels.Enabled()
	m.fs.setPinPaths(sb)
	return sb
}

// run is the recipe; each step pushes its undo, run in reverse if a later step fails.
//
//  1. pause image (built in, imported once)
//  2. containerd container, phase "creating": the durable intent record; on
//     containerd 2.x also a record in its sandbox store (sandbox_store.go)
//  3. pod files: hostname, hosts, resolv.conf, /dev/shm
//  4. network namespace
//  5. CNI ADD and the pause task, concurrently
//  6. record phase "created" with the pod's IPs: the sandbox is READY
func (m *Manager) run(ctx context.Context, sb *Sandbox, rt pod.Handler) (err error) {
	var undo undoStack
	defer func() {
		if err != nil {
			cctx, cancel := m.cleanupContext(ctx)
			defer cancel()
			if undo.run(cctx, "sandbox "+sb.ID) {
				m.destroyLater(sb)
			}
		}
	}()
	if err := m.allocateLabels(sb, &undo); err != nil {
		return err
	}
	if sb.Pauseless {
		return m.runPauseless(ctx, sb, rt, &undo)
	}

	t0 := time.Now()
	rootfs, err := m.createPauseContainer(ctx, sb, rt)
	if errdefs.IsNotFound(err) {
		// The cached pause image was removed behind shimd's back: ensure it again.
		m.opts.PauseImage.Forget()
		rootfs, err = m.createPauseContainer(ctx, sb, rt)
	}
	if err != nil {
		return err
	}
	undo.push(func(ctx context.Context) error { return m.deleteContainer(ctx, sb.ID) })
	undoStore, err := m.records.recordInStore(ctx, sb, rt)
	if err != nil {
		return err
	}
	undo.push(undoStore)

	t1 := time.Now()
	undoFiles, err := m.fs.writeFiles(sb)
	if err != nil {
		return err
	}
	undo.push(func(context.Context) error { undoFiles(); return nil })

	if err := m.fs.createNamespaces(sb); err != nil {
		return err
	}
	undo.push(func(context.Context) error { return m.fs.removeNamespaces(sb) })

	// The pause process needs only the namespace to exist, not the network inside it,
	// so the CNI plugins and the shim start in parallel.
	t2 := time.Now()
	var tNet time.Duration
	netc := make(chan error, 1)
	go func() {
		err := m.setupNetwork(ctx, sb)
		tNet = time.Since(t2) // written before the send, read after the receive
		netc <- err
	}()
	pid, tCreate, taskErr := m.tasks.start(ctx, sb, rt, rootfs)
	tTask := time.Since(t2)
	netErr := <-netc
	if sb.NetNSPath != "" {
		// Even a failed ADD may hold an address: DEL releases whatever it got.
		undo.push(func(ctx context.Context) error { return m.opts.Network.Teardown(ctx, attachment(sb)) })
	}
	if taskErr != nil {
		// A runc create that failed half way may leave the cgroup it made: removed
		// once the task is deleted (undos run last-pushed first).
		undo.push(func(ctx context.Context) error { m.cgroups.remove(ctx, sb); return nil })
	}
	// A failed create or start may still leave a task (a create cut short by the
	// deadline): delete whatever containerd has.
	undo.push(func(ctx context.Context) error { return m.tasks.delete(ctx, sb.ID) })
	if err := errors.Join(taskErr, netErr); err != nil {
		return err
	}
	sb.setPausePID(pid)

	if err := m.updateRecord(ctx, sb, PhaseCreated); err != nil {
		return fmt.Errorf("record sandbox: %w", err)
	}
	log.G(ctx).WithField("ips", sb.IPs).WithField("mode", "pause").WithField("steps", fmt.Sprintf("container=%s files+netns=%s cni=%s task=%s task-create=%s task-start=%s record=%s",
		t1.Sub(t0), t2.Sub(t1), tNet, tTask, tCreate, tTask-tCreate, time.Since(t2)-max(tNet, tTask))).Info("sandbox ready")
	return nil
}

// allocateLabels gives sb its SELinux labels, from its SELinuxOptions, with a level
// of its own unless they name one; remove (or the undo) releases the level. A pod in
// the node's PID or IPC namespace gets none, as with CRI-O ("no SELinux separation
// with host PID or IPC"): its processes run under the runtime's label.
func (m *Manager) allocateLabels(sb *Sandbox, undo *undoStack) error {
	if pod.HostPIDOrIPC(sb.Config) {
		return nil
	}
	l, err := m.opts.Labels.Pod(sb.ID, sb.Config.GetLinux().GetSecurityContext().GetSelinuxOptions())
	if err != nil {
		return err
	}
	sb.ProcessLabel, sb.MountLabel = l.Process, l.Mount
	undo.push(func(context.Context) error { m.opts.Labels.Release(sb.ID, l.Process); return nil })
	return nil
}

// runPauseless is run's recipe for a pod without a pause process (pauseless.go):
//
//  1. containerd container, phase "creating": the durable intent record
//  2. pod files: hostname, hosts, resolv.conf, /dev/shm
//  3. network, IPC and UTS namespaces, with hostname and sysctls
//  4. CNI ADD
//  5. the running marker; record phase "created" with the pod's IPs: READY
func (m *Manager) runPauseless(ctx context.Context, sb *Sandbox, rt pod.Handler, undo *undoStack) error {
	t0 := time.Now()
	if err := m.createRecord(ctx, sb, rt); err != nil {
		return err
	}
	undo.push(func(ctx context.Context) error { return m.deleteContainer(ctx, sb.ID) })
	undoFiles, err := m.fs.writeFiles(sb)
	if err != nil {
		return err
	}
	undo.push(func(context.Context) error { undoFiles(); return nil })
	if err := m.fs.createPins(sb, pod.Sysctls(sb.Config, m.opts.Sysctls)); err != nil {
		return err
	}
	undo.push(func(context.Context) error { return m.fs.removeNamespaces(sb) })
	t1 := time.Now()
	err = m.setupNetwork(ctx, sb)
	if sb.NetNSPath != "" {
		undo.push(func(ctx context.Context) error { return m.opts.Network.Teardown(ctx, attachment(sb)) })
	}
	if err != nil {
		return err
	}
	t2 := time.Now()
	if err := m.fs.markRunning(sb.ID); err != nil {
		return fmt.Errorf("mark sandbox running: %w", err)
	}
	if err := m.updateRecord(ctx, sb, PhaseCreated); err != nil {
		return fmt.Errorf("record sandbox: %w", err)
	}
	log.G(ctx).WithField("ips", sb.IPs).WithField("mode", "pause-less").WithField("steps", fmt.Sprintf("pauseless record+files+namespaces=%s cni=%s record=%s",
		t1.Sub(t0), t2.Sub(t1), time.Since(t2))).Info("sandbox ready")
	return nil
}

// snapshotOpts are the options of the pod's snapshot: with the pod's own user
// namespace its files are remapped to the pod's host ids.
func snapshotOpts(sb *Sandbox) []snapshots.Opt {
	u := sb.UserNamespace()
	if u == nil {
		return nil
	}
	um, gm := u.GetUids()[0], u.GetGids()[0]
	return []snapshots.Opt{client.WithRemapperLabels(0, um.GetHostId(), 0, gm.GetHostId(), um.GetLength())}
}

// createPauseContainer writes the sandbox's containerd container, phase "creating".
// It returns the mounts of the pod's snapshot when it prepared the snapshot itself.
func (m *Manager) createPauseContainer(ctx context.Context, sb *Sandbox, rt pod.Handler) ([]mount.Mount, error) {
	img, err := m.opts.PauseImage.Ensure(ctx, rt.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	info, err := m.pauseProcs.of(ctx, img)
	if err != nil {
		return nil, err
	}
	in := PauseSpecInput{
		ID: sb.ID, Namespace: m.opts.Namespace, Config: sb.Config, ImageArgs: info.args, ImageEnv: info.env,
		NetNSPath: sb.NetNSPath, UsernsPath: m.fs.usernsPath(sb), CgroupDriver: m.opts.CgroupDriver, MinOOMScoreAdj: m.opts.MinOOMScoreAdj,
		ImageName: img.Name(), ProcessLabel: sb.ProcessLabel, MountLabel: sb.MountLabel,
		Sysctls: pod.Sysctls(sb.Config, m.opts.Sysctls),
	}
	if sb.SharedRootfs {
		in.RootPath = m.opts.PauseRootfs
	}
	spec, err := PauseSpec(in)
	if err != nil {
		return nil, fmt.Errorf("pause spec: %w", err)
	}
	opts := []client.NewContainerOpts{
		client.WithImageName(img.Name()),
		client.WithRuntime(rt.Type, rt.Options),
		client.WithSpec(spec),
		withRecord(sb, PhaseCreating),
	}
	if sb.SharedRootfs {
		// No snapshot: nothing to prepare, mount, unmount or remove per pod.
		if err := ctrd.CreateContainer(ctx, m.opts.Client.ContainerService(), sb.ID, opts...); err != nil {
			return nil, fmt.Errorf("create pause container: %w", err)
		}
		return nil, nil
	}
	opts = append(opts, client.WithSnapshotter(rt.Snapshotter))
	if snOpts := snapshotOpts(sb); len(snOpts) > 0 {
		// A pod with its own user namespace: the client resolves how its snapshot is
		// remapped (the snapshotter's capabilities) and prepares it before the record
		// exists, so a lease keeps it until then. shimd's labelled lease, not the
		// client's default one: a lease left by a crash here is deleted by recovery
		// instead of holding the snapshot for a day. The task reads the mounts.
		ctx, done, err := image.WithLease(ctx, m.opts.Client, "sandbox")
		if err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
		defer done(context.WithoutCancel(ctx)) //nolint:errcheck // recovery deletes it otherwise
		if _, err := m.opts.Client.NewContainer(ctx, sb.ID, append(opts, client.WithNewSnapshot(sb.ID, img, snOpts...))...); err != nil {
			return nil, fmt.Errorf("create pause container: %w", err)
		}
		return nil, nil
	}
	// The record first, naming the snapshot it is about to get: from then on
	// containerd's garbage collector keeps the snapshot, so no lease is needed. The
	// snapshot's parent is the cached chain id, and its mounts are kept for the
	// task: no read of the image's content and no mounts call per pod.
	if err := ctrd.CreateContainer(ctx, m.opts.Client.ContainerService(), sb.ID, append(opts, ctrd.WithSnapshotKey(rt.Snapshotter, sb.ID))...); err != nil {
		return nil, fmt.Errorf("create pause container: %w", err)
	}
	rootfs, err := m.opts.Client.SnapshotService(rt.Snapshotter).Prepare(ctx, sb.ID, info.chainID)
	if err != nil {
		cctx, cancel := m.cleanupContext(ctx)
		defer cancel()
		if derr := m.opts.Client.ContainerService().Delete(cctx, sb.ID); derr != nil && !errdefs.IsNotFound(derr) {
			log.G(ctx).WithError(derr).Warn("undo pause container record")
		}
		// NotFound (the image's layers are gone) makes the caller ensure the image again.
		return nil, fmt.Errorf("prepare pause snapshot: %w", err)
	}
	return rootfs, nil
}

func (m *Manager) setupNetwork(ctx context.Context, sb *Sandbox) error {
	if sb.NetNSPath == "" {
		return nil
	}
	res, err := m.opts.Network.Setup(ctx, attachment(sb))
	if err != nil {
		return fmt.Errorf("set up pod network: %w", err)
	}
	for _, ip := range res.IPs {
		sb.IPs = append(sb.IPs, ip.String())
	}
	return nil
}

// pauseProcesses caches what pause containers take from pause images' configs, by
// the image's digest.
type pauseProcesses struct{ byDigest sync.Map }

// of returns the pause image's entrypoint+cmd and env, cached.
func (c *pauseProcesses) of(ctx context.Context, image client.Image) (pauseImageInfo, error) {
	key := image.Target().Digest.String()
	if v, ok := c.byDigest.Load(key); ok {
		return v.(pauseImageInfo), nil
	}
	spec, err := image.Spec(ctx)
	if err != nil {
		return pauseImageInfo{}, fmt.Errorf("read pause image config: %w", err)
	}
	info := pauseImageInfo{
		args:    append(append([]string{}, spec.Config.Entrypoint...), spec.Config.Cmd...),
		env:     spec.Config.Env,
		chainID: identity.ChainID(spec.RootFS.DiffIDs).String(),
	}
	c.byDigest.Store(key, info)
	return info, nil
}

// pauseImageInfo is what a pod's pause container takes from the pause image's config.
type pauseImageInfo struct {
	args, env []string
	// chainID names the image's unpacked layers: the parent of each pod's snapshot.
	chainID string
}
