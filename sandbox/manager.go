package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/network"
)

// Network is what sandboxes need from pod networking.
type Network interface {
	Setup(ctx context.Context, a network.Attachment) (*network.Result, error)
	Teardown(ctx context.Context, a network.Attachment) error
	Ready() error
}

// PauseImages provides the pause image, unpacked for a snapshotter. Ensure may cache;
// Forget drops the cache after the image turned out to be gone.
type PauseImages interface {
	Ensure(ctx context.Context, snapshotter string) (client.Image, error)
	Forget()
}

// Runtime is one runtime handler: a containerd runtime (shim) and its options.
type Runtime struct {
	Type        string
	Options     any // e.g. *options.Options for io.containerd.runc.v2
	Snapshotter string
	// GVisor is set for gVisor's runsc shim: the pod's network stack lives in its
	// sandbox, which runsc reaches (port forwarding).
	GVisor *network.Runsc
	// PauseOptional: runc's shim with an OCI runtime of the host's kernel; its pods
	// may run without a pause container (pauseless.go).
	PauseOptional bool
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
	Runtimes          map[string]Runtime
	DefaultRuntime    string
	Network           Network
	PauseImage        PauseImages
	PauseImageRef     string
	// PauseWhenNeeded: pods that need no pause container get none (sandbox.pause =
	// "when-needed", pauseless.go).
	PauseWhenNeeded bool
	// MinOOMScoreAdj is shimd's own oom_score_adj; nothing is given less.
	MinOOMScoreAdj int
	// CleanupTimeout bounds undo and teardown work detached from a request.
	CleanupTimeout time.Duration
}

// Manager runs pod sandboxes. It is safe for concurrent use.
type Manager struct {
	opts  Options
	store *store

	// imageArgs caches the pause image's process (entrypoint+cmd, env) by config digest.
	imageArgs sync.Map
	// running holds the ids of sandboxes whose Run is in progress (their records
	// are "creating" on purpose); the live sweep leaves them alone.
	running sync.Map
	// sandboxStore: containerd has a sandbox store (2.x); pods are recorded there.
	sandboxStore atomic.Bool
	// swept is set once recovery's Sweep has run: from then on, a reconnection to
	// containerd sweeps again (SweepLive).
	swept atomic.Bool
	// sweepMu serialises the live sweeps: SweepLive (after a reconnection) and
	// SweepUnfinishedRuns (also shimd's periodic sweep).
	sweepMu sync.Mutex
	// runs are the Run recipes in progress, detached from their callers.
	runs sync.WaitGroup
}

// NewManager makes a Manager; call Recover before serving.
func NewManager(opts Options) *Manager {
	if opts.CleanupTimeout == 0 {
		opts.CleanupTimeout = 2 * time.Minute
	}
	return &Manager{opts: opts, store: newStore()}
}

// Close is for shutdown, after the server stopped: it waits for the Run recipes in
// progress (each bounded by the cleanup timeout), so that none is cut in half.
func (m *Manager) Close() { m.runs.Wait() }

func (m *Manager) netnsDir() string { return filepath.Join(m.opts.StateDir, "netns") }

// usernsDir pins the user namespaces of pods that have their own.
func (m *Manager) usernsDir() string { return filepath.Join(m.opts.StateDir, "userns") }

// usernsPath is where the user namespace of a pod with its own is pinned, else "".
func (m *Manager) usernsPath(sb *Sandbox) string {
	if sb.UserNamespace() == nil {
		return ""
	}
	return filepath.Join(m.usernsDir(), sb.ID)
}

// Runtime resolves a runtime handler name ("" is the default).
func (m *Manager) Runtime(handler string) (Runtime, error) {
	if handler == "" {
		handler = m.opts.DefaultRuntime
	}
	rt, ok := m.opts.Runtimes[handler]
	if !ok {
		return Runtime{}, fmt.Errorf("runtime handler %q is not configured: %w", handler, errdefs.ErrInvalidArgument)
	}
	return rt, nil
}

// Get returns a sandbox by id or unique id prefix.
func (m *Manager) Get(id string) (*Sandbox, error) { return m.store.get(id) }

// List returns every sandbox, oldest first.
func (m *Manager) List() []*Sandbox { return m.store.list() }

// cleanupContext is detached from any request, so a kubelet timeout never leaves half
// a pod behind, but bounded.
func (m *Manager) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.opts.CleanupTimeout)
}

// undoStack runs recorded undo steps in reverse order.
type undoStack []func(ctx context.Context) error

func (u *undoStack) push(f func(ctx context.Context) error) { *u = append(*u, f) }

func (u undoStack) run(ctx context.Context, what string) {
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i](ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("undo %s", what)
		}
	}
}

// Snapshotters lists the runtime handlers' snapshotters, each once, sorted.
func (m *Manager) Snapshotters() []string {
	var out []string
	for _, rt := range m.opts.Runtimes {
		if !slices.Contains(out, rt.Snapshotter) {
			out = append(out, rt.Snapshotter)
		}
	}
	slices.Sort(out)
	return out
}
