package sandbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/log"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/seclabel"
)

// Network is what sandboxes need from pod networking.
type Network interface {
	Setup(ctx context.Context, a network.Attachment) (*network.Result, error)
	Teardown(ctx context.Context, a network.Attachment) error
	// Attached reports whether the pod with this id may still hold what an ADD
	// gave it (an IPAM lease, host-side links and rules): no DEL has finished.
	Attached(id string) bool
	Ready() error
}

// PauseImages provides the pause image, unpacked for a snapshotter. Ensure may cache;
// Forget drops the cache after the image turned out to be gone.
type PauseImages interface {
	Ensure(ctx context.Context, snapshotter string) (client.Image, error)
	Forget()
}

// Options configures a Manager.
type Options struct {
	Client *client.Client
	// ContainerdAddress is containerd's socket: its shims name it on their command
	// line and derive their sockets from it.
	ContainerdAddress string
	Namespace         string
	RootDir           string
	StateDir          string
	CgroupDriver      string
	// Handlers are the runtime handlers (Run checks the pod's).
	Handlers      pod.Handlers
	Network       Network
	PauseImage    PauseImages
	PauseImageRef string
	// PauseRootfs is a directory holding the pause image's files (pause.WriteRootfs)
	// that the pause containers of runc-like handlers run from, read-only, instead of
	// each from a snapshot of its own; "": always a snapshot (a configured image).
	PauseRootfs string
	// PauseWhenNeeded: pods that need no pause container get none (sandbox.pause =
	// "when-needed", pauseless.go).
	PauseWhenNeeded bool
	// MinOOMScoreAdj is shimd's own oom_score_adj; nothing is given less.
	MinOOMScoreAdj int
	// Sysctls are the sysctls pods get unless they set them (pod.Sysctls).
	Sysctls pod.SysctlDefaults
	// CleanupTimeout bounds undo and teardown work detached from a request.
	CleanupTimeout time.Duration
	// Cleanups retries the cleanups that failed (package cleanup); nil: none is
	// retried (it stays until the next restart's recovery or reconnection).
	Cleanups *cleanup.Queue
	// Labels gives each pod its SELinux labels (seclabel); nil: none (no SELinux).
	Labels *seclabel.Labeler
}

// Manager runs pod sandboxes. It is safe for concurrent use.
type Manager struct {
	opts  Options
	store *store
	fs    layout // paths and files on the host
	// cgroups are the pause tasks' cgroups; shims, the shim processes (recovery's).
	cgroups podCgroups
	shims   shims

	// pauseProcs caches the pause image's process (entrypoint+cmd, env).
	pauseProcs pauseProcesses
	tasks      pauseTasks
	// running holds the sandboxes whose Run is in progress, by id (their records
	// are "creating" on purpose, or "created" while they are announced); the live
	// sweep leaves them alone, and TaskExit finds them here until they are listed.
	running sync.Map // id -> *Sandbox
	// records are the pods' records in containerd's sandbox store (sandbox_store.go).
	records *storeRecords
	// swept is set once recovery's Sweep has run: from then on, a reconnection to
	// containerd sweeps again (SweepLive).
	swept atomic.Bool
	// sweepMu serialises the live sweeps: SweepLive (after a reconnection) and
	// and the cleanup queue's retries of destroy.
	sweepMu sync.Mutex
	// runs are the Run recipes in progress, detached from their callers.
	runs sync.WaitGroup
}

// NewManager makes a Manager; call Recover before serving.
func NewManager(opts Options) *Manager {
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 2 * time.Minute
	}
	if opts.Labels == nil {
		opts.Labels = seclabel.Disabled()
	}
	return &Manager{opts: opts, store: newStore(), fs: layout{root: opts.RootDir, state: opts.StateDir, sel: opts.Labels},
		cgroups: podCgroups{driver: opts.CgroupDriver, namespace: opts.Namespace},
		shims:   shims{client: opts.Client, address: opts.ContainerdAddress, namespace: opts.Namespace},
		tasks:   pauseTasks{client: opts.Client},
		records: &storeRecords{store: ctrd.NewSandboxStore(opts.Client)}}
}

// PodShimSocket finds the socket of the shim that runs a pause-less pod's containers
// (shims.podSocket). The container package asks it for exits while containerd is away
// (container.Exits.Live).
func (m *Manager) PodShimSocket(id string) (string, error) { return m.shims.podSocket(id) }

// Close is for shutdown, after the server stopped: it waits for the Run recipes in
// progress (each bounded by the cleanup timeout), so that none is cut in half.
func (m *Manager) Close() { m.runs.Wait() }

// Pod returns the facts of a sandbox, found by id or unique id prefix (NotFound if
// none).
func (m *Manager) Pod(id string) (pod.Pod, error) {
	sb, err := m.store.get(id)
	if err != nil {
		return pod.Pod{}, err
	}
	return m.facts(sb, sb.State()), nil
}

// Pods returns the facts of every sandbox, oldest first. A pause-less pod's pins are
// checked at most once per pinCheckEvery (listState).
func (m *Manager) Pods() []pod.Pod {
	sbs := m.store.list()
	out := make([]pod.Pod, 0, len(sbs))
	now := time.Now()
	for _, sb := range sbs {
		out = append(out, m.facts(sb, sb.listState(now)))
	}
	return out
}

// facts is what sb's containers may know of it, read now, in state st.
func (m *Manager) facts(sb *Sandbox, st pod.State) pod.Pod {
	overhead, resources := sb.PodResources()
	return pod.Pod{
		ID: sb.ID, Name: sb.Name, Config: sb.Config, RuntimeHandler: sb.RuntimeHandler, CreatedAt: sb.CreatedAt,
		State: st, NetNSPath: sb.NetNSPath, IPCNSPath: sb.IPCNSPath, UTSNSPath: sb.UTSNSPath,
		Pauseless: sb.Pauseless, PID: sb.PausePID(), IPs: sb.IPs, InStore: sb.InStore,
		Overhead: overhead, Resources: resources, Files: sb.filesIn(m.fs),
		ProcessLabel: sb.ProcessLabel, MountLabel: sb.MountLabel,
	}
}

// cleanupContext is detached from any request, so a kubelet timeout never leaves half
// a pod behind, but bounded.
func (m *Manager) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.opts.CleanupTimeout)
}

// undoStack runs recorded undo steps in reverse order.
type undoStack []func(ctx context.Context) error

func (u *undoStack) push(f func(ctx context.Context) error) { *u = append(*u, f) }

// run runs the undos in reverse and reports whether one failed.
func (u undoStack) run(ctx context.Context, what string) (failed bool) {
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i](ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("undo %s", what)
			failed = true
		}
	}
	return failed
}

// PausePID returns the pid of a READY pod's pause process. When recovery could not
// read it (recheckPauseLater has not yet either), it is read now, within ctx: a
// CreateContainer need not wait for the next retry once the shim answers. 0 when it
// is still not known, or none runs.
func (m *Manager) PausePID(ctx context.Context, id string) uint32 {
	sb, err := m.store.get(id)
	if err != nil || sb.Pauseless || sb.State() != pod.Ready {
		return 0
	}
	if pid := sb.PausePID(); pid != 0 {
		return pid
	}
	pid, _, err := m.tasks.read(ctx, sb.ID)
	if err != nil || pid == 0 {
		return 0
	}
	sb.setPausePID(pid)
	return pid
}

// recheckPauseLater reads sb's pause task again and again (Options.Cleanups) until
// containerd tells its state: recovery could not, and left sb READY without a pid.
// The pid is taken then, or sb is NOTREADY if the task no longer runs. A sandbox
// stopped or removed meanwhile is left as it is.
func (m *Manager) recheckPauseLater(sb *Sandbox) {
	if m.opts.Cleanups == nil {
		return
	}
	m.opts.Cleanups.Add("pause task of sandbox "+sb.ID, func(ctx context.Context) error {
		if cur, err := m.store.get(sb.ID); err != nil || cur != sb || sb.State() != pod.Ready || sb.PausePID() != 0 {
			return nil
		}
		pid, running, err := m.tasks.read(ctx, sb.ID)
		if err != nil {
			return err
		}
		l := log.G(ctx).WithField("sandbox", sb.ID)
		switch {
		case pid != 0:
			sb.setPausePID(pid)
			l.WithField("pid", pid).Info("pause task's state read after recovery: it runs")
		case !running:
			sb.setState(pod.NotReady)
			l.Info("pause task's state read after recovery: it no longer runs, NOTREADY")
		}
		return nil
	})
}

// destroyLater runs destroy(sb) again and again until it succeeds
// (Options.Cleanups): an undo of sb's Run just failed, or recovery's.
func (m *Manager) destroyLater(sb *Sandbox) {
	if m.opts.Cleanups == nil {
		return
	}
	m.opts.Cleanups.Add("sandbox "+sb.ID, func(ctx context.Context) error {
		m.sweepMu.Lock() // not beside a live sweep's undo of the same record
		defer m.sweepMu.Unlock()
		return m.destroy(ctx, sb)
	})
}
