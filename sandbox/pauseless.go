package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/containerd/containerd/v2/client"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/record"
)

// Pause-less pods (sandbox.pause = "when-needed", CRI-O's drop_infra_ctr).
//
// A pod gets no pause process when nothing needs one: its PID namespace is not
// shared by its containers (a pause process would be the pod's init), it has no user
// namespace of its own, and its runtime handler is runc's shim running an OCI runtime
// of the host's kernel (a VM or gVisor sandbox is made from the pause container).
// Such a pod's network, IPC and UTS namespaces are made by shimd on one locked OS
// thread, which sets the pod's hostname and namespaced sysctls there and pins each
// namespace with a bind mount under the state dir (netns/<id>, ipcns/<id>,
// utsns/<id>); the thread is never unlocked, so it exits with its goroutine and no
// goroutine ever runs in the pod's namespaces. Containers join them by path.
//
// The durable record is a containerd container as for every pod (labels, extension
// with "pauseless": true), without snapshot, image or task. A pause-less pod is not
// recorded in containerd's sandbox store (which would want the pod's shim: the pause
// task's); its containers share one shim through the io.kubernetes.cri.sandbox-id
// annotation instead (runc's shim groups containers by it, on containerd 1.6 too).
//
// States: READY from Run until StopPodSandbox, as long as the marker file
// <state>/sandboxes/<id>/running exists and every pinned namespace is still mounted;
// NOTREADY after Stop (which removes the marker and the pins) or once a pin is gone
// (someone unmounted it): the kubelet then stops and recreates the pod.

// pauseless tells whether a pod of this config on this runtime runs without a pause.
func (m *Manager) pauseless(cfg *runtimeapi.PodSandboxConfig, rt Runtime) bool {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	u := ns.GetUsernsOptions()
	return m.opts.PauseWhenNeeded && rt.PauseOptional && rt.GVisor == nil &&
		ns.GetPid() != runtimeapi.NamespaceMode_POD &&
		(u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD)
}

func (m *Manager) ipcnsDir() string           { return filepath.Join(m.opts.StateDir, "ipcns") }
func (m *Manager) utsnsDir() string           { return filepath.Join(m.opts.StateDir, "utsns") }
func (m *Manager) ipcnsPath(id string) string { return filepath.Join(m.ipcnsDir(), id) }
func (m *Manager) utsnsPath(id string) string { return filepath.Join(m.utsnsDir(), id) }

// runningMarker exists while a pause-less pod has not been stopped.
func (m *Manager) runningMarker(id string) string { return filepath.Join(m.stateDir(id), "running") }

// setPinPaths fills sb's pinned IPC and UTS namespace paths from its config.
func (m *Manager) setPinPaths(sb *Sandbox) {
	if !sb.Pauseless {
		return
	}
	if sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() != runtimeapi.NamespaceMode_NODE {
		sb.IPCNSPath = m.ipcnsPath(sb.ID)
	}
	if !sb.HostNetwork() {
		sb.UTSNSPath = m.utsnsPath(sb.ID)
	}
}

// nsfsMagic is the f_type of a namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// pinsAlive tells whether each of sb's pinned namespaces is still mounted.
func pinsAlive(sb *Sandbox) bool {
	for _, p := range []string{sb.NetNSPath, sb.IPCNSPath, sb.UTSNSPath} {
		if p == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil || st.Type != nsfsMagic {
			return false
		}
	}
	return true
}

// createRecord writes a pause-less pod's containerd container, phase "creating": no
// snapshot, no image; the spec is the pause spec it would have had (never run).
func (m *Manager) createRecord(ctx context.Context, sb *Sandbox, rt Runtime) error {
	spec, err := PauseSpec(PauseSpecInput{
		ID: sb.ID, Namespace: m.opts.Namespace, Config: sb.Config, ImageArgs: []string{"/pause"},
		NetNSPath: sb.NetNSPath, CgroupDriver: m.opts.CgroupDriver, MinOOMScoreAdj: m.opts.MinOOMScoreAdj,
	})
	if err != nil {
		return fmt.Errorf("sandbox spec: %w", err)
	}
	// No lease: the record holds no snapshot or content for the collector to take.
	if err := record.CreateContainer(ctx, m.opts.Client.ContainerService(), sb.ID,
		client.WithRuntime(rt.Type, rt.Options),
		client.WithSpec(spec),
		withRecord(sb, PhaseCreating),
	); err != nil {
		return fmt.Errorf("create sandbox record: %w", err)
	}
	return nil
}

// pinRequest is what pinNamespaces makes: each non-empty path gets a new namespace
// of its kind pinned there.
type pinRequest struct {
	NetNS, IPCNS, UTSNS string
	// Hostname is set in the new UTS namespace; Sysctls (dotted names) are written in
	// the new namespaces.
	Hostname string
	Sysctls  map[string]string
}

// pinNamespaces makes the namespaces of a pause-less pod on a locked OS thread that is
// never unlocked (it exits with its goroutine), and pins them by bind mounts. On
// failure nothing is left pinned.
func pinNamespaces(req pinRequest) (err error) {
	kinds := []struct {
		path, ns string
		flag     int
	}{{req.NetNS, "net", unix.CLONE_NEWNET}, {req.IPCNS, "ipc", unix.CLONE_NEWIPC}, {req.UTSNS, "uts", unix.CLONE_NEWUTS}}
	flags := 0
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				_ = network.RemoveNetNS(p)
			}
		}
	}()
	for _, k := range kinds {
		if k.path == "" {
			continue
		}
		flags |= k.flag
		if err := os.MkdirAll(filepath.Dir(k.path), 0o711); err != nil {
			return fmt.Errorf("create %s namespace dir: %w", k.ns, err)
		}
		f, err := os.OpenFile(k.path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return fmt.Errorf("create %s namespace mount point: %w", k.ns, err)
		}
		f.Close()
		made = append(made, k.path)
	}
	if flags == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread dies with this goroutine, in the pod's namespaces.
		runtime.LockOSThread()
		if err := unix.Unshare(flags); err != nil {
			errc <- fmt.Errorf("unshare pod namespaces: %w", err)
			return
		}
		if req.UTSNS != "" && req.Hostname != "" {
			if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
				errc <- fmt.Errorf("set hostname %q: %w", req.Hostname, err)
				return
			}
		}
		for k, v := range req.Sysctls {
			// Dotted name to path: '.' separates, a '/' is a dot inside a segment.
			p := filepath.Join("/proc/sys", swapDotsSlashes(k))
			if err := os.WriteFile(p, []byte(v), 0); err != nil {
				errc <- fmt.Errorf("set sysctl %s: %w", k, err)
				return
			}
		}
		tid := strconv.Itoa(unix.Gettid())
		for _, k := range kinds {
			if k.path == "" {
				continue
			}
			src := "/proc/self/task/" + tid + "/ns/" + k.ns
			if err := unix.Mount(src, k.path, "none", unix.MS_BIND, ""); err != nil {
				errc <- fmt.Errorf("pin %s namespace at %s: %w", k.ns, k.path, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// createPins makes a pause-less pod's namespaces (see pinNamespaces).
func (m *Manager) createPins(sb *Sandbox) error {
	req := pinRequest{NetNS: sb.NetNSPath, IPCNS: sb.IPCNSPath, UTSNS: sb.UTSNSPath, Hostname: sb.Config.GetHostname()}
	if s := sb.Config.GetLinux().GetSysctls(); len(s) > 0 {
		req.Sysctls = map[string]string{}
		for k, v := range s {
			req.Sysctls[NormalizeSysctlName(k)] = v
		}
	}
	return pinNamespaces(req)
}

// removePins unpins a pause-less pod's IPC and UTS namespaces; missing ones are fine.
func (m *Manager) removePins(id string) error {
	return errors.Join(network.RemoveNetNS(m.ipcnsPath(id)), network.RemoveNetNS(m.utsnsPath(id)))
}

// markRunning writes the marker of a pause-less pod that has not been stopped.
func (m *Manager) markRunning(id string) error {
	if err := os.MkdirAll(m.stateDir(id), 0o700); err != nil {
		return err
	}
	return os.WriteFile(m.runningMarker(id), nil, 0o600)
}

// unmarkRunning removes the marker: the pod is stopped, also for recovery.
func (m *Manager) unmarkRunning(id string) error {
	if err := os.Remove(m.runningMarker(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove running marker of sandbox %s: %w", id, err)
	}
	return nil
}

// recoverPauseless sets a recovered pause-less pod's state: READY while its marker
// and every pin are there, stopped once the marker is gone.
func (m *Manager) recoverPauseless(sb *Sandbox) {
	m.setPinPaths(sb)
	if _, err := os.Stat(m.runningMarker(sb.ID)); err != nil {
		sb.stopped = true
		return
	}
	if pinsAlive(sb) {
		sb.state = StateReady
	}
}
