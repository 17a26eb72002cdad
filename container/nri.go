package container

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/runtime/spec"
)

// NRI plugins (package nri) hear of pods and containers through these calls:
//
//	RunPodSandbox            after the pod is READY; a plugin's error undoes the pod
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

// nriOn tells whether NRI is on and, if the NRIPlugins can tell (Active), a plugin
// is connected: with none, nothing is converted or read for them.
func (s *Manager) nriOn() bool {
	if s.opts.NRI == nil {
		return false
	}
	a, ok := s.opts.NRI.(interface{ Active() bool })
	return !ok || a.Active()
}

// nriPod converts a pod for NRI.
func (s *Manager) nriPod(sb pod.Pod) *api.PodSandbox {
	meta := sb.Config.GetMetadata()
	overhead, resources := sb.Overhead, sb.Resources
	linux := &api.LinuxPodSandbox{
		CgroupParent: sb.Config.GetLinux().GetCgroupParent(),
		CgroupsPath:  pod.CgroupPath(sb.Config.GetLinux().GetCgroupParent(), sb.ID, s.opts.CgroupDriver),
		PodOverhead:  s.nriResources(overhead),
		PodResources: s.nriResources(resources),
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

func (s *Manager) nriResources(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	return api.FromOCILinuxResources(spec.Resources(r, s.opts.MinOOMScoreAdj), nil)
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

// nriSpec reads a container's OCI spec from containerd (nil if it cannot).
func (s *Manager) nriSpec(ctx context.Context, id string) *specs.Spec {
	cc, err := s.opts.Client.LoadContainer(ctx, id)
	if err != nil {
		return nil
	}
	sp, err := cc.Spec(ctx)
	if err != nil {
		return nil
	}
	return sp
}

// nriPodEvent tells plugins of a pod event; its error is returned.
func (s *Manager) nriPodEvent(ctx context.Context, ev api.Event, sb pod.Pod) error {
	if !s.nriOn() {
		return nil
	}
	if err := s.opts.NRI.PodEvent(ctx, ev, s.nriPod(sb)); err != nil {
		return fmt.Errorf("NRI plugins refused %s of pod %s: %w", ev, sb.ID, err)
	}
	return nil
}

// nriContainerEvent tells plugins of an event after the fact; an error is logged.
func (s *Manager) nriContainerEvent(ctx context.Context, ev api.Event, c *Container) {
	if !s.nriOn() {
		return
	}
	sb, err := s.opts.Pods.Pod(c.SandboxID)
	if err != nil {
		return
	}
	if err := s.opts.NRI.ContainerEvent(ctx, ev, s.nriPod(sb), nriContainer(c, s.nriSpec(ctx, c.ID))); err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Warnf("NRI %s", ev)
	}
}

// nriAdjust lets plugins adjust a new container's spec.
func (s *Manager) nriAdjust(ctx context.Context, c *Container, sb pod.Pod, sp *specs.Spec) error {
	if !s.nriOn() {
		return nil
	}
	if err := s.opts.NRI.CreateContainer(ctx, s.nriPod(sb), nriContainer(c, sp), sp); err != nil {
		return fmt.Errorf("NRI plugins refused container %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// NRIState lists the pods and containers that exist, for NRI plugin synchronization.
func (s *Manager) NRIState(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	var pods []*api.PodSandbox
	for _, sb := range s.opts.Pods.Pods() {
		pods = append(pods, s.nriPod(sb))
	}
	var ctrs []*api.Container
	for _, c := range s.containers.list() {
		ctrs = append(ctrs, nriContainer(c, s.nriSpec(ctx, c.ID)))
	}
	return pods, ctrs, nil
}

// NRIUpdate applies resource updates NRI plugins ask for and returns those that
// failed (and must not be ignored).
func (s *Manager) NRIUpdate(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		c, err := s.containers.get(u.GetContainerId())
		if err == nil && u.GetLinux().GetResources() != nil {
			err = s.updateResources(ctx, c, fromNRIResources(u.GetLinux().GetResources(), c.Resources()))
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

// NRIRunPod tells plugins of a new pod; FailedPrecondition if one refuses it (the
// caller undoes the pod).
func (s *Manager) NRIRunPod(ctx context.Context, id string) error {
	if !s.nriOn() {
		return nil
	}
	sb, err := s.opts.Pods.Pod(id)
	if err != nil {
		return err
	}
	// Detached: a kubelet that gives up must not make plugins refuse the pod.
	cctx, cancel := s.detachedContext(ctx)
	defer cancel()
	if err := s.nriPodEvent(cctx, api.Event_RUN_POD_SANDBOX, sb); err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// NRIPodStopped tells plugins a pod stopped, once per pod.
func (s *Manager) NRIPodStopped(ctx context.Context, sb pod.Pod) {
	if !s.nriOn() || !s.nriStopOnce(sb.ID) {
		return
	}
	if err := s.nriPodEvent(ctx, api.Event_STOP_POD_SANDBOX, sb); err != nil {
		log.G(ctx).WithError(err).Warn("NRI")
	}
}

// NRIPodRemoved tells plugins a pod is gone.
func (s *Manager) NRIPodRemoved(ctx context.Context, sb pod.Pod) {
	s.nriStopped.Delete(sb.ID)
	if err := s.nriPodEvent(ctx, api.Event_REMOVE_POD_SANDBOX, sb); err != nil {
		log.G(ctx).WithError(err).Warn("NRI")
	}
}

// nriStart tells plugins a container is about to start; an error refuses it.
func (s *Manager) nriStart(ctx context.Context, c *Container) error {
	if !s.nriOn() {
		return nil
	}
	sb, err := s.opts.Pods.Pod(c.SandboxID)
	if err != nil {
		return err
	}
	if err := s.opts.NRI.ContainerEvent(ctx, api.Event_START_CONTAINER, s.nriPod(sb), nriContainer(c, s.nriSpec(ctx, c.ID))); err != nil {
		return fmt.Errorf("NRI plugins refused to start container %s: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// SetNRI hands the runtime its NRI plugins (made before it, since they call back
// into it); call it before serving.
func (s *Manager) SetNRI(n NRIPlugins) { s.opts.NRI = n }

// nriStopOnce tells whether plugins are yet to hear that pod id stopped (once per
// pod and shimd run: StopPodSandbox is repeated by the kubelet).
func (s *Manager) nriStopOnce(id string) bool {
	_, told := s.nriStopped.LoadOrStore(id, true)
	return !told
}

// NRIUpdatePod asks plugins about new pod-level resources; FailedPrecondition if one
// refuses.
func (s *Manager) NRIUpdatePod(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error {
	if !s.nriOn() {
		return nil
	}
	sb, err := s.opts.Pods.Pod(id)
	if err != nil {
		return err
	}
	if err := s.opts.NRI.UpdatePodSandbox(ctx, s.nriPod(sb), s.nriResources(overhead), s.nriResources(resources)); err != nil {
		return fmt.Errorf("NRI plugins refused the update of pod %s: %v: %w", sb.ID, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}
