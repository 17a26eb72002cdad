// Package nri connects shimd to Node Resource Interface plugins
// (github.com/containerd/nri), as containerd 2.x and CRI-O do: plugins started from
// a plugin directory or connecting to shimd's NRI socket see pod and container
// lifecycle events, adjust a container's OCI spec before it is created, and ask for
// updates of containers' resources. It knows nothing of containerd or CRI: the
// runtime converts its pods and containers to NRI's types and applies updates
// through the functions it hands to New.
//
// Each request to a plugin has the plugin request timeout; a plugin that does not
// answer in time, or whose connection breaks, is closed by the NRI library and the
// request goes on without it, so a hanging or crashing plugin delays a pod or
// container by at most that timeout. A plugin that answers with an error fails the
// request (its answer is what it wants).
package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Options configures NRI.
type Options struct {
	// Name and Version identify the runtime to plugins.
	Name, Version string
	// SocketPath is where external plugins connect; "" with DisableConnections.
	SocketPath string
	// PluginPath holds plugins shimd starts itself (NN-name executables);
	// PluginConfigPath their configuration drop-ins.
	PluginPath, PluginConfigPath string
	// DisableConnections refuses plugins that connect by themselves.
	DisableConnections bool
	// RegistrationTimeout bounds a plugin's registration, RequestTimeout each request.
	RegistrationTimeout, RequestTimeout time.Duration
	// InjectCDI applies CDI devices a plugin asks for (nil: such a request fails).
	InjectCDI func(spec *specs.Spec, devices []string) error
	// State lists the pods and containers that exist, for a plugin that connects.
	State func(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error)
	// Update applies the container updates plugins ask for and returns those that
	// failed.
	Update func(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
}

// NRI relays events to plugins. Its methods are safe for concurrent use (the NRI
// library serializes them).
type NRI struct {
	opts    Options
	r       *nri.Adaptation
	plugins atomic.Int64 // connected plugins, as the library counts them
}

// New makes the NRI adaptation; nothing runs before Start.
func New(opts Options) (*NRI, error) {
	if opts.RegistrationTimeout > 0 {
		nri.SetPluginRegistrationTimeout(opts.RegistrationTimeout)
	}
	if opts.RequestTimeout > 0 {
		nri.SetPluginRequestTimeout(opts.RequestTimeout)
	}
	n := &NRI{opts: opts}
	ropts := []nri.Option{nri.WithPluginPath(opts.PluginPath), nri.WithPluginConfigPath(opts.PluginConfigPath)}
	if opts.DisableConnections {
		ropts = append(ropts, nri.WithDisabledExternalConnections())
	} else {
		if err := os.MkdirAll(filepath.Dir(opts.SocketPath), 0o711); err != nil {
			return nil, fmt.Errorf("nri socket directory: %w", err)
		}
		ropts = append(ropts, nri.WithSocketPath(opts.SocketPath))
	}
	ropts = append(ropts, nri.WithMetrics(pluginCount{n}))
	r, err := nri.New(opts.Name, opts.Version, n.sync, n.update, ropts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	n.r = r
	return n, nil
}

// Start launches the plugins of the plugin directory (each is synchronized with the
// pods and containers State lists as it registers) and listens on the socket. Call
// it once the runtime has recovered its state: after a restart, that is how
// plugins learn the pods that exist.
func (n *NRI) Start() error {
	if err := n.r.Start(); err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	return nil
}

// Active tells whether a plugin is connected: the runtime converts nothing for
// plugins while none is.
func (n *NRI) Active() bool { return n.plugins.Load() > 0 }

// pluginCount keeps NRI.plugins from the library's metrics hook.
type pluginCount struct{ n *NRI }

func (pluginCount) RecordPluginInvocation(string, string, error)                               {}
func (pluginCount) RecordPluginLatency(string, string, time.Duration)                          {}
func (pluginCount) RecordPluginAdjustments(string, string, *nri.ContainerAdjustment, int, int) {}
func (p pluginCount) UpdatePluginCount(count int)                                              { p.n.plugins.Store(int64(count)) }

// BlockSync holds off plugins' synchronization until unblock is called: a pod
// being announced (RunPodSandbox) is not yet listed by State, so a plugin that
// synchronized meanwhile would learn of it neither way.
func (n *NRI) BlockSync() (unblock func()) { return n.r.BlockPluginSync().Unblock }

// Stop closes every plugin connection and the socket.
func (n *NRI) Stop() { n.r.Stop() }

func (n *NRI) sync(ctx context.Context, cb nri.SyncCB) error {
	pods, ctrs, err := n.opts.State(ctx)
	if err != nil {
		return err
	}
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	if len(updates) > 0 {
		if failed, err := n.opts.Update(ctx, updates); err != nil || len(failed) > 0 {
			log.G(ctx).WithError(err).WithField("failed", len(failed)).Warn("nri: updates of a plugin's synchronization")
		}
	}
	return nil
}

func (n *NRI) update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.opts.Update(ctx, updates)
}

// PodEvent relays a pod's run, stop or remove.
func (n *NRI) PodEvent(ctx context.Context, ev api.Event, pod *api.PodSandbox) error {
	switch ev {
	case api.Event_RUN_POD_SANDBOX:
		return n.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	case api.Event_STOP_POD_SANDBOX:
		return n.r.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
	case api.Event_REMOVE_POD_SANDBOX:
		return n.r.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	}
	return fmt.Errorf("nri: event %s is not a pod event", ev)
}

// UpdatePodSandbox tells plugins of UpdatePodSandboxResources, then that it is done.
func (n *NRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error {
	if _, err := n.r.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod, OverheadLinuxResources: overhead, LinuxResources: resources}); err != nil {
		return err
	}
	return n.r.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod})
}

// CreateContainer asks plugins for their adjustments and applies them to spec;
// updates of other containers they ask for are applied as well (a failure there is
// logged, as in containerd).
func (n *NRI) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, spec *specs.Spec) error {
	resp, err := n.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return err
	}
	if len(resp.GetUpdate()) > 0 {
		if failed, err := n.opts.Update(ctx, resp.GetUpdate()); err != nil || len(failed) > 0 {
			log.G(ctx).WithError(err).WithField("failed", len(failed)).Warn("nri: updates asked for at container creation")
		}
	}
	if adj := resp.GetAdjust(); adj != nil {
		var opts []nrigen.GeneratorOption
		if n.opts.InjectCDI != nil {
			opts = append(opts, nrigen.WithCDIDeviceInjector(n.opts.InjectCDI))
		}
		if err := nrigen.SpecGenerator(&specGen{s: spec}, opts...).Adjust(adj); err != nil {
			return fmt.Errorf("apply the NRI plugins' adjustment: %w", err)
		}
	}
	return nil
}

// ContainerEvent relays a container event that asks nothing back: post-create,
// start, post-start, post-update, stop (its updates are applied) and remove.
func (n *NRI) ContainerEvent(ctx context.Context, ev api.Event, pod *api.PodSandbox, ctr *api.Container) error {
	switch ev {
	case api.Event_POST_CREATE_CONTAINER:
		return n.r.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr})
	case api.Event_START_CONTAINER:
		return n.r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr})
	case api.Event_POST_START_CONTAINER:
		return n.r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr})
	case api.Event_POST_UPDATE_CONTAINER:
		return n.r.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
	case api.Event_STOP_CONTAINER:
		resp, err := n.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
		if err == nil && len(resp.GetUpdate()) > 0 {
			if failed, uerr := n.opts.Update(ctx, resp.GetUpdate()); uerr != nil || len(failed) > 0 {
				log.G(ctx).WithError(uerr).WithField("failed", len(failed)).Warn("nri: updates asked for at container stop")
			}
		}
		return err
	case api.Event_REMOVE_CONTAINER:
		return n.r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
	}
	return fmt.Errorf("nri: event %s is not a container event", ev)
}

// UpdateContainer asks plugins about new resources of a container (an
// UpdateContainerResources); it returns the resources to apply.
func (n *NRI) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, error) {
	resp, err := n.r.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
	if err != nil {
		return nil, err
	}
	out := res
	var others []*api.ContainerUpdate
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() == ctr.GetId() {
			if r := u.GetLinux().GetResources(); r != nil {
				out = r
			}
			continue
		}
		others = append(others, u)
	}
	if len(others) > 0 {
		if failed, err := n.opts.Update(ctx, others); err != nil || len(failed) > 0 {
			log.G(ctx).WithError(err).WithField("failed", len(failed)).Warn("nri: updates asked for at a container update")
		}
	}
	return out, nil
}
