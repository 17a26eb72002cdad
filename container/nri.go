package container

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/spec"
)

// NRI plugins (package nri) hear of pods and containers through these calls:
//
//	RunPodSandbox            after the pod is READY, before it is listed (no
//	                         container can be made in it yet); a plugin's error
//	                         undoes the pod
//	StopPodSandbox           after a READY pod stopped
//	RemovePodSandbox         after the pod is removed
//	UpdatePodSandboxResources before it is recorded; a plugin's error fails it
//	CreateContainer          with the OCI spec, before the containerd container is
//	                         made: the plugins' adjustments are applied to the spec
//	PostCreateContainer      after it is CREATED
//	StartContainer           before the task starts (an error is a StartError)
//	PostStartContainer       after it is RUNNING
//	UpdateContainerResources before the limits are applied; plugins may change them
//	StopContainer            after it exited (stopped or by itself)
//	RemoveContainer          after it is removed (also when a create failed after
//	                         the plugins saw it)
//
// Events after the fact are told but their errors only logged. Plugins' own
// updates (at synchronization, or unsolicited) go through the same path as
// UpdateContainerResources, without asking the plugins again.

// NRIGlue tells NRI plugins of pods and containers, lets them adjust a container's
// spec, and applies the updates they ask for. The runtime service reaches it through
// Manager.NRI.
type NRIGlue struct {
	m       *Manager
	plugins NRIPlugins // nil: NRI is off
	stopped sync.Map   // pod ids whose stop plugins were told of
}

// NRI is the container manager's NRI glue.
func (s *Manager) NRI() *NRIGlue { return s.nri }

// NRIPlugins relays to NRI plugins; *nri.NRI implements it. nil: NRI is off.
type NRIPlugins interface {
	PodEvent(ctx context.Context, ev api.Event, pod *api.PodSandbox) error
	UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error
	// CreateContainer applies the plugins' adjustments to spec.
	CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, spec *specs.Spec) error
	ContainerEvent(ctx context.Context, ev api.Event, pod *api.PodSandbox, ctr *api.Container) error
	// UpdateContainer returns the resources to apply.
	UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, error)
}

// on tells whether NRI is on and, if the NRIPlugins can tell (Active), a plugin
// is connected: with none, nothing is converted or read for them.
func (n *NRIGlue) on() bool {
	if n.plugins == nil {
		return false
	}
	a, ok := n.plugins.(interface{ Active() bool })
	return !ok || a.Active()
}

// pod converts a pod for NRI.
func (n *NRIGlue) pod(sb pod.Pod) *api.PodSandbox {
	meta := sb.Config.GetMetadata()
	overhead, resources := sb.Overhead, sb.Resources
	linux := &api.LinuxPodSandbox{
		CgroupParent: sb.Config.GetLinux().GetCgroupParent(),
		CgroupsPath:  pod.CgroupPath(sb.Config.GetLinux().GetCgroupParent(), sb.ID, n.m.opts.CgroupDriver),
		PodOverhead:  toNRIResources(overhead, n.m.opts.MinOOMScoreAdj),
		PodResources: toNRIResources(resources, n.m.opts.MinOOMScoreAdj),
	}
	for _, ns := range [][2]string{{"network", sb.NetNSPath}, {"ipc", sb.IPCNSPath}, {"uts", sb.UTSNSPath}} {
		if ns[1] != "" { // IPC and UTS: a pause-less pod's pinned ones
			linux.Namespaces = append(linux.Namespaces, &api.LinuxNamespace{Type: ns[0], Path: ns[1]})
		}
	}
	return &api.PodSandbox{
		Id: sb.ID, Name: meta.GetName(), Uid: meta.GetUid(), Namespace: meta.GetNamespace(),
		Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.RuntimeHandler,
		Linux: linux, Pid: sb.PID, Ips: sb.IPs,
	}
}

func toNRIResources(r *runtimeapi.LinuxContainerResources, minOOMScoreAdj int) *api.LinuxResources {
	if r == nil {
		return nil
	}
	return api.FromOCILinuxResources(spec.Resources(r, minOOMScoreAdj), nil)
}

var nriStates = map[runtimeapi.ContainerState]api.ContainerState{
	runtimeapi.ContainerState_CONTAINER_CREATED: api.ContainerState_CONTAINER_CREATED,
	runtimeapi.ContainerState_CONTAINER_RUNNING: api.ContainerState_CONTAINER_RUNNING,
	runtimeapi.ContainerState_CONTAINER_EXITED:  api.ContainerState_CONTAINER_STOPPED,
}

// nriContainer converts a container and its OCI spec (nil: what the record has is
// left out) for NRI.
func nriContainer(c *Container, sp *specs.Spec) *api.Container {
	st := c.Status()
	out := &api.Container{
		Id: c.ID, PodSandboxId: c.SandboxID, Name: c.Config.GetMetadata().GetName(), State: nriStates[st.State],
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(), Pid: st.Pid,
		CreatedAt: c.CreatedAt.UnixNano(), StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		ExitCode: st.ExitCode, StatusReason: st.Reason, StatusMessage: st.Message,
	}
	for _, d := range c.Config.GetCDIDevices() {
		out.CDIDevices = append(out.CDIDevices, &api.CDIDevice{Name: d.GetName()})
	}
	if sp == nil {
		return out
	}
	if sp.Process != nil {
		out.Args, out.Env = sp.Process.Args, sp.Process.Env
	}
	out.Mounts = api.FromOCIMounts(sp.Mounts)
	out.Hooks = api.FromOCIHooks(sp.Hooks)
	if l := sp.Linux; l != nil {
		out.Linux = &api.LinuxContainer{
			Namespaces: api.FromOCILinuxNamespaces(l.Namespaces), Devices: api.FromOCILinuxDevices(l.Devices),
			Resources: api.FromOCILinuxResources(l.Resources, nil), CgroupsPath: l.CgroupsPath,
		}
		if sp.Process != nil && sp.Process.OOMScoreAdj != nil {
			out.Linux.OomScoreAdj = api.Int(sp.Process.OOMScoreAdj)
		}
	}
	return out
}

// spec reads a container's OCI spec from containerd (nil if it cannot).
func (n *NRIGlue) spec(ctx context.Context, id string) *specs.Spec {
	cc, err := n.m.opts.Client.LoadContainer(ctx, id)
	if err != nil {
		return nil
	}
	sp, err := cc.Spec(ctx)
	if err != nil {
		return nil
	}
	return sp
}

// podEvent tells plugins of a pod event; its error is returned.
func (n *NRIGlue) podEvent(ctx context.Context, ev api.Event, sb pod.Pod) error {
	if !n.on() {
		return nil
	}
	if err := n.plugins.PodEvent(ctx, ev, n.pod(sb)); err != nil {
		return fmt.Errorf("NRI plugins refused %s of pod %s: %w", ev, sb.ID, err)
	}
	return nil
}

// containerEvent tells plugins of an event after the fact; an error is logged.
func (n *NRIGlue) containerEvent(ctx context.Context, ev api.Event, c *Container) {
	if !n.on() {
		return
	}
	sb, err := n.m.opts.Pods.Pod(c.SandboxID)
	if err != nil {
		return
	}
	if err := n.plugins.ContainerEvent(ctx, ev, n.pod(sb), nriContainer(c, n.spec(ctx, c.ID))); err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Warnf("NRI %s", ev)
	}
}

// adjust lets plugins adjust a new container's spec.
func (n *NRIGlue) adjust(ctx context.Context, c *Container, sb pod.Pod, sp *specs.Spec) error {
	if !n.on() {
		return nil
	}
	if err := n.plugins.CreateContainer(ctx, n.pod(sb), nriContainer(c, sp), sp); err != nil {
		return fmt.Errorf("NRI plugins refused container %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// State lists the pods and containers that exist, for NRI plugin synchronization.
func (n *NRIGlue) State(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	var pods []*api.PodSandbox
	for _, sb := range n.m.opts.Pods.Pods() {
		pods = append(pods, n.pod(sb))
	}
	var ctrs []*api.Container
	for _, c := range n.m.containers.list() {
		ctrs = append(ctrs, nriContainer(c, n.spec(ctx, c.ID)))
	}
	return pods, ctrs, nil
}

// Update applies resource updates NRI plugins ask for and returns those that
// failed (and must not be ignored).
func (n *NRIGlue) Update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		c, err := n.m.containers.get(u.GetContainerId())
		if err == nil && u.GetLinux().GetResources() != nil {
			err = n.m.updateResources(ctx, c, fromNRIResources(u.GetLinux().GetResources(), c.Resources()))
		}
		if err != nil {
			log.G(ctx).WithError(err).WithField("container", u.GetContainerId()).Warn("NRI plugin's container update")
			if !u.GetIgnoreFailure() {
				failed = append(failed, u)
			}
		}
	}
	return failed, nil
}

// fromNRIResources lays NRI resources over a container's CRI resources: what NRI
// sets replaces, what it leaves unset stays.
func fromNRIResources(r *api.LinuxResources, base *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{}
	if base != nil {
		out = proto.Clone(base).(*runtimeapi.LinuxContainerResources)
	}
	if cpu := r.GetCpu(); cpu != nil {
		if v := cpu.GetShares().Get(); v != nil {
			out.CpuShares = int64(*v)
		}
		if v := cpu.GetQuota().Get(); v != nil {
			out.CpuQuota = *v
		}
		if v := cpu.GetPeriod().Get(); v != nil {
			out.CpuPeriod = int64(*v)
		}
		if cpu.GetCpus() != "" {
			out.CpusetCpus = cpu.GetCpus()
		}
		if cpu.GetMems() != "" {
			out.CpusetMems = cpu.GetMems()
		}
	}
	if mem := r.GetMemory(); mem != nil {
		if v := mem.GetLimit().Get(); v != nil {
			out.MemoryLimitInBytes = *v
		}
		if v := mem.GetSwap().Get(); v != nil {
			out.MemorySwapLimitInBytes = *v
		}
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	if len(r.GetUnified()) > 0 {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		for k, v := range r.GetUnified() {
			out.Unified[k] = v
		}
	}
	return out
}

// RunPod tells plugins of a new pod, READY but not yet listed (sandbox.Manager.Run's
// announce); FailedPrecondition if one refuses it (Run undoes the pod). Plugins'
// synchronization waits from here until done (the pod is listed or undone), so
// that a plugin that connects meanwhile learns of the pod either from this event or
// from its synchronization, as with containerd.
func (n *NRIGlue) RunPod(ctx context.Context, sb pod.Pod) (done func(), err error) {
	if n.plugins == nil {
		return nil, nil
	}
	done = n.blockSync()
	// Detached: a kubelet that gives up must not make plugins refuse the pod.
	cctx, cancel := n.m.detachedContext(ctx)
	defer cancel()
	if err := n.podEvent(cctx, api.Event_RUN_POD_SANDBOX, sb); err != nil {
		return done, fmt.Errorf("%v: %w", err, errdefs.ErrFailedPrecondition)
	}
	return done, nil
}

// blockSync holds off plugins' synchronization (which lists the pods and
// containers that exist, State) until unblock is called: a pod or container being
// made, not yet listed but already told to plugins, is then neither missed by a
// plugin that connects meanwhile nor told to it twice. A no-op without NRI, or
// with NRIPlugins that cannot (BlockSync). Never called while holding it: a
// second hold waits for a synchronization waiting for the first.
func (n *NRIGlue) blockSync() (unblock func()) {
	if b, ok := n.plugins.(interface{ BlockSync() (unblock func()) }); ok {
		return b.BlockSync()
	}
	return func() {}
}

// PodStopped tells plugins a pod stopped, once per pod.
func (n *NRIGlue) PodStopped(ctx context.Context, sb pod.Pod) {
	if !n.on() || !n.stopOnce(sb.ID) {
		return
	}
	if err := n.podEvent(ctx, api.Event_STOP_POD_SANDBOX, sb); err != nil {
		log.G(ctx).WithError(err).Warn("NRI")
	}
}

// PodRemoved tells plugins a pod is gone.
func (n *NRIGlue) PodRemoved(ctx context.Context, sb pod.Pod) {
	n.stopped.Delete(sb.ID)
	if err := n.podEvent(ctx, api.Event_REMOVE_POD_SANDBOX, sb); err != nil {
		log.G(ctx).WithError(err).Warn("NRI")
	}
}

// start tells plugins a container is about to start; an error refuses it.
func (n *NRIGlue) start(ctx context.Context, c *Container) error {
	if !n.on() {
		return nil
	}
	sb, err := n.m.opts.Pods.Pod(c.SandboxID)
	if err != nil {
		return err
	}
	if err := n.plugins.ContainerEvent(ctx, api.Event_START_CONTAINER, n.pod(sb), nriContainer(c, n.spec(ctx, c.ID))); err != nil {
		return fmt.Errorf("NRI plugins refused to start container %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// SetPlugins hands the glue its NRI plugins (made after the manager, since they call
// back into it); call it once, before serving.
func (n *NRIGlue) SetPlugins(p NRIPlugins) { n.plugins = p }

// stopOnce tells whether plugins are yet to hear that pod id stopped (once per
// pod and shimd run: StopPodSandbox is repeated by the kubelet).
func (n *NRIGlue) stopOnce(id string) bool {
	_, told := n.stopped.LoadOrStore(id, true)
	return !told
}

// UpdatePod asks plugins about new pod-level resources; FailedPrecondition if one
// refuses.
func (n *NRIGlue) UpdatePod(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error {
	if !n.on() {
		return nil
	}
	sb, err := n.m.opts.Pods.Pod(id)
	if err != nil {
		return err
	}
	if err := n.plugins.UpdatePodSandbox(ctx, n.pod(sb), toNRIResources(overhead, n.m.opts.MinOOMScoreAdj), toNRIResources(resources, n.m.opts.MinOOMScoreAdj)); err != nil {
		return fmt.Errorf("NRI plugins refused the update of pod %s: %v: %w", sb.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}
