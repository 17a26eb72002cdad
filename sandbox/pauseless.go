package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
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
func (m *Manager) pauseless(cfg *runtimeapi.PodSandboxConfig, rt pod.Handler) bool {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	u := ns.GetUsernsOptions()
	return m.opts.PauseWhenNeeded && rt.PauseOptional && rt.Dialer == nil &&
		ns.GetPid() != runtimeapi.NamespaceMode_POD &&
		(u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD)
}

func (l layout) ipcnsDir() string           { return filepath.Join(l.state, "ipcns") }
func (l layout) utsnsDir() string           { return filepath.Join(l.state, "utsns") }
func (l layout) ipcnsPath(id string) string { return filepath.Join(l.ipcnsDir(), id) }
func (l layout) utsnsPath(id string) string { return filepath.Join(l.utsnsDir(), id) }

// runningMarker exists while a pause-less pod has not been stopped.
func (l layout) runningMarker(id string) string { return filepath.Join(l.stateDir(id), "running") }

// setPinPaths fills sb's pinned IPC and UTS namespace paths from its config.
func (l layout) setPinPaths(sb *Sandbox) {
	if !sb.Pauseless {
		return
	}
	if sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() != runtimeapi.NamespaceMode_NODE {
		sb.IPCNSPath = l.ipcnsPath(sb.ID)
	}
	if !sb.HostNetwork() {
		sb.UTSNSPath = l.utsnsPath(sb.ID)
	}
}

// pinsAlive tells whether each of sb's pinned namespaces is still mounted.
func pinsAlive(sb *Sandbox) bool {
	for _, p := range []string{sb.NetNSPath, sb.IPCNSPath, sb.UTSNSPath} {
		if p == "" {
			continue
		}
		if !network.IsNamespace(p) {
			return false
		}
	}
	return true
}

// createRecord writes a pause-less pod's containerd container, phase "creating": no
// snapshot, no image; the spec is the pause spec it would have had (never run).
func (m *Manager) createRecord(ctx context.Context, sb *Sandbox, rt pod.Handler) error {
	spec, err := PauseSpec(PauseSpecInput{
		ID: sb.ID, Namespace: m.opts.Namespace, Config: sb.Config, ImageArgs: []string{"/pause"},
		NetNSPath: sb.NetNSPath, CgroupDriver: m.opts.CgroupDriver, MinOOMScoreAdj: m.opts.MinOOMScoreAdj,
		ProcessLabel: sb.ProcessLabel, MountLabel: sb.MountLabel, Sysctls: pod.Sysctls(sb.Config, m.opts.Sysctls),
	})
	if err != nil {
		return fmt.Errorf("sandbox spec: %w", err)
	}
	// No lease: the record holds no snapshot or content for the collector to take.
	if err := ctrd.CreateContainer(ctx, m.opts.Client.ContainerService(), sb.ID,
		client.WithRuntime(rt.Type, rt.Options),
		client.WithSpec(spec),
		withRecord(sb, PhaseCreating),
	); err != nil {
		return fmt.Errorf("create sandbox record: %w", err)
	}
	return nil
}

// createPins makes a pause-less pod's namespaces (see network.Pin), with the pod's
// sysctls (pod.Sysctls).
func (l layout) createPins(sb *Sandbox, sysctls map[string]string) error {
	return network.Pin(network.PinRequest{NetNS: sb.NetNSPath, IPCNS: sb.IPCNSPath, UTSNS: sb.UTSNSPath, Hostname: sb.Config.GetHostname(), Sysctls: sysctls})
}

// removePins unpins a pause-less pod's IPC and UTS namespaces; missing ones are fine.
func (l layout) removePins(id string) error {
	return errors.Join(network.RemoveNetNS(l.ipcnsPath(id)), network.RemoveNetNS(l.utsnsPath(id)))
}

// markRunning writes the marker of a pause-less pod that has not been stopped.
func (l layout) markRunning(id string) error {
	if err := os.MkdirAll(l.stateDir(id), 0o700); err != nil {
		return err
	}
	return os.WriteFile(l.runningMarker(id), nil, 0o600)
}

// unmarkRunning removes the marker: the pod is stopped, also for recovery.
func (l layout) unmarkRunning(id string) error {
	if err := os.Remove(l.runningMarker(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove running marker of sandbox %s: %w", id, err)
	}
	return nil
}

// recoverPauseless sets a recovered pause-less pod's state: READY while its marker
// and every pin are there, stopped once the marker is gone.
func (m *Manager) recoverPauseless(sb *Sandbox) {
	m.fs.setPinPaths(sb)
	if _, err := os.Stat(m.fs.runningMarker(sb.ID)); err != nil {
		sb.stopped = m.networkDown(sb)
		return
	}
	if pinsAlive(sb) {
		sb.state = pod.Ready
	}
}
