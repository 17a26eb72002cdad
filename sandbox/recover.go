package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/log"
	"golang.org/x/sync/errgroup"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// Recover rebuilds the sandbox store from containerd after a (re)start of shimd.
//
// Assumptions:
//   - containerd is the only durable store. Every sandbox is a container in shimd's
//     namespace labelled io.shimd.kind=sandbox with an io.shimd.sandbox extension.
//   - Run writes that container (phase "creating") before it creates any other
//     resource, and derives every other resource's location from the sandbox id: the
//     netns at <state>/netns/<id>, files under <root>/sandboxes/<id> and
//     <state>/sandboxes/<id>, the snapshot keyed by the id (none when its record
//     says shared_rootfs: the pause then ran from the shared read-only
//     Options.PauseRootfs, which no pod owns and recovery leaves alone). So a
//     sandbox still "creating" is undone whole, and anything on disk without a
//     container is an orphan of a Run that died before step 2, and is removed.
//   - A sandbox whose pause task runs is READY; otherwise NOTREADY. One whose netns is
//     gone (or that uses the host network and has no task) was stopped, unless
//     libcni's cache still holds its attachment (networkDown): then a reboot took
//     the netns with /run, and its Stop still owes the CNI DEL. When
//     containerd cannot tell the pause task's state (its shim did not answer in
//     time) the sandbox is READY, and the state is read again until it is known
//     (recheckPauseLater): the pid comes then, or NOTREADY if the task is gone.
//   - A pause-less pod (pauseless.go) is READY while its running marker and every
//     pinned namespace (<state>/{netns,ipcns,utsns}/<id>) are there; without the
//     marker it was stopped (networkDown, as above). Pins of no known sandbox are
//     orphans and are removed.
//
// Recover must finish before any RPC is served.
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.fs.prepare(); err != nil {
		return err
	}
	list, err := m.opts.Client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", LabelKind, KindSandbox))
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	known := map[string]bool{}
	recovered := map[string]*Sandbox{}
	var withPause []*Sandbox
	for _, c := range list {
		known[c.ID] = true
		sb, err := decodeRecord(c)
		if err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", c.ID).Error("unreadable sandbox record: left in place")
			continue
		}
		m.fs.setPinPaths(sb)
		if c.Labels[LabelPhase] != PhaseCreated {
			log.G(ctx).WithField("sandbox", c.ID).Info("undoing sandbox whose creation was interrupted")
			dctx, cancel := context.WithTimeout(ctx, cleanup.RecoveryAttempt)
			err := m.destroy(dctx, sb)
			cancel()
			if err != nil {
				log.G(ctx).WithError(err).WithField("sandbox", c.ID).Warn("undo interrupted sandbox; will retry")
				m.destroyLater(sb)
			}
			delete(known, c.ID)
			continue
		}
		if err := m.opts.Labels.Reserve(sb.ID, sb.ProcessLabel); err != nil {
			// The pod keeps running under its label; only a new pod could be given
			// the same level by chance.
			log.G(ctx).WithError(err).WithField("sandbox", c.ID).Warn("reserve the pod's SELinux level again")
		}
		if sb.Pauseless {
			m.recoverPauseless(sb)
			m.store.add(sb)
			recovered[sb.ID] = sb
			continue
		}
		withPause = append(withPause, sb)
	}
	// containerd waits up to 2 s for each task's state from its shim: the pause
	// tasks are read side by side, so that busy shims cost that once, not per pod.
	pids := make([]uint32, len(withPause))
	errs := make([]error, len(withPause))
	var g errgroup.Group
	g.SetLimit(cleanup.RecoveryReads)
	for i, sb := range withPause {
		g.Go(func() error {
			pids[i], _, errs[i] = m.tasks.read(ctx, sb.ID)
			return nil
		})
	}
	_ = g.Wait()
	for i, sb := range withPause {
		switch {
		case errs[i] != nil:
			// The task is there but its state is not known (a shim too busy to
			// answer): NOTREADY on that guess would make the kubelet kill the pod.
			log.G(ctx).WithError(errs[i]).WithField("sandbox", sb.ID).Warn("pause task's state unknown: READY until containerd tells it")
			sb.state = pod.Ready
			m.recheckPauseLater(sb)
		case pids[i] != 0:
			sb.state, sb.pid = pod.Ready, pids[i]
		}
		if sb.NetNSPath != "" {
			if _, err := os.Stat(sb.NetNSPath); err != nil {
				sb.stopped = m.networkDown(sb)
			}
		}
		m.store.add(sb)
		recovered[sb.ID] = sb
	}
	m.removeOrphans(ctx, known)
	return m.records.recoverStore(ctx, recovered)
}

// Sweep runs after the sandboxes and containers are recovered, before shimd serves:
// it stops the shims no task uses and removes the cgroups no container has, both
// leftovers of a crash in the middle of a task's create or delete.
func (m *Manager) Sweep(ctx context.Context) error {
	if err := m.sweep(ctx, false); err != nil {
		return err
	}
	m.swept.Store(true)
	return nil
}

// SweepLive is Sweep while shimd serves, after containerd came back: a Run whose
// undo failed while containerd was away left its "creating" record, task and shim;
// they are undone now, then shims without a task are stopped and empty cgroups
// removed. Work in progress is left alone.
func (m *Manager) SweepLive(ctx context.Context) {
	if !m.swept.Load() {
		return // recovery has not run yet; it sweeps itself
	}
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	m.undoUnfinishedRuns(ctx)
	if err := m.sweep(ctx, true); err != nil {
		log.G(ctx).WithError(err).Warn("sweep")
	}
}

// undoUnfinishedRuns undoes the sandboxes whose Run never finished, is not in
// progress and is not in the store: an undo that failed while containerd was away,
// or during recovery while the shim was still busy. It stops no shim that way other
// than the pause task's own. The caller holds sweepMu.
func (m *Manager) undoUnfinishedRuns(ctx context.Context) {
	list, err := m.opts.Client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", LabelKind, KindSandbox))
	if err != nil {
		log.G(ctx).WithError(err).Warn("sweep: list sandboxes")
		return
	}
	for _, c := range list {
		if _, running := m.running.Load(c.ID); running || c.Labels[LabelPhase] == PhaseCreated {
			continue
		}
		if _, err := m.store.get(c.ID); err == nil {
			continue
		}
		sb, err := decodeRecord(c)
		if err != nil {
			continue
		}
		m.fs.setPinPaths(sb)
		log.G(ctx).WithField("sandbox", c.ID).Info("undoing sandbox whose creation never finished")
		if err := m.destroy(ctx, sb); err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", c.ID).Warn("undo interrupted sandbox; will retry")
			m.destroyLater(sb)
		}
	}
}

func (m *Manager) sweep(ctx context.Context, live bool) error {
	if _, err := m.shims.reapOrphans(ctx, live); err != nil {
		return err
	}
	ctrs, err := m.opts.Client.ContainerService().List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	known := map[string]bool{}
	for _, c := range ctrs {
		known[c.ID] = true
	}
	m.cgroups.removeOrphans(ctx, func(id string) bool { return known[id] })
	return nil
}

// removeOrphans deletes per-sandbox resources that belong to no known sandbox.
func (m *Manager) removeOrphans(ctx context.Context, known map[string]bool) {
	pinDirs := []string{m.fs.usernsDir(), m.fs.ipcnsDir(), m.fs.utsnsDir()}
	for _, dir := range append([]string{m.fs.netnsDir(), filepath.Join(m.opts.StateDir, "sandboxes"), filepath.Join(m.opts.RootDir, "sandboxes")}, pinDirs...) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			id := e.Name()
			if known[id] || !isID(id) {
				continue
			}
			log.G(ctx).WithField("sandbox", id).Info("removing orphaned sandbox files")
			switch dir {
			case m.fs.netnsDir():
				// The IP lease of an orphaned netns is released by DEL without a netns.
				_ = m.opts.Network.Teardown(ctx, network.Attachment{ID: id})
				_ = network.RemoveNetNS(filepath.Join(dir, id))
				continue
			}
			if slices.Contains(pinDirs, dir) {
				_ = network.RemoveNetNS(filepath.Join(dir, id))
				continue
			}
			_ = m.fs.removeFiles(id)
		}
	}
	m.removeOrphanSnapshots(ctx, known)
}

// removeOrphanSnapshots deletes snapshots keyed by a sandbox id with no container: a
// Run that died inside NewContainer, between snapshot and container record.
func (m *Manager) removeOrphanSnapshots(ctx context.Context, known map[string]bool) {
	for _, name := range m.opts.Handlers.Snapshotters() {
		sn := m.opts.Client.SnapshotService(name)
		var orphans []string
		_ = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			if isID(info.Name) && !known[info.Name] && !m.containerExists(ctx, info.Name) {
				orphans = append(orphans, info.Name)
			}
			return nil
		})
		for _, key := range orphans {
			if err := sn.Remove(ctx, key); err == nil {
				log.G(ctx).WithField("snapshot", key).Info("removed orphaned snapshot")
			}
		}
	}
}

func (m *Manager) containerExists(ctx context.Context, id string) bool {
	_, err := m.opts.Client.ContainerService().Get(ctx, id)
	return err == nil
}

// isID tells whether s looks like an id shimd made (64 lowercase hex digits).
func isID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// networkDown tells whether a recovered pod whose netns (or pause-less running
// marker) is gone had its network torn down, as a finished Stop leaves it. A reboot
// takes both with /run while the IPAM lease and libcni's cache are on disk: a
// cached attachment means no DEL has finished, and the pod is not stopped yet.
func (m *Manager) networkDown(sb *Sandbox) bool {
	return sb.NetNSPath == "" || !m.opts.Network.Attached(sb.ID)
}
