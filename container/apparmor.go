package container

import (
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/contrib/apparmor"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/seclabel"
	"github.com/shimd/shimd/spec"
)

// appArmorDefault keeps shimd's default AppArmor profile (NodeInfo.AppArmorDefault)
// loaded in the kernel. cmd/shimd loads it at start; each create of a container that
// runs under it checks again (one read of the kernel's profile list) and loads it
// when missing, as containerd's CRI plugin does (apparmor.WithDefaultProfile): the
// node's administrator may have unloaded it (aa-teardown, a reload of the apparmor
// service that removes unknown profiles).
type appArmorDefault struct {
	mu   sync.Mutex // one load at a time: two creates run apparmor_parser once
	load func(name string) error
}

func newAppArmorDefault() *appArmorDefault {
	return &appArmorDefault{load: apparmor.LoadDefaultProfile}
}

// ensure loads the profile unless the kernel has it; the error wraps
// errdefs.ErrFailedPrecondition (the node, not the request, is at fault).
func (a *appArmorDefault) ensure(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.load(name); err != nil {
		return fmt.Errorf("load the default AppArmor profile %q: %v: %w", name, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// confinement is what confines a container beyond its spec's own fields: AppArmor
// (the node's, shimd's default profile kept loaded) and SELinux (the labeler, the
// volumes' relabelling). It uses nothing else of the Manager.
type confinement struct {
	node     NodeInfo          // its AppArmor and AppArmorDefault
	apparmor *appArmorDefault  // keeps AppArmorDefault loaded
	labels   *seclabel.Labeler // never nil: seclabel.Disabled() without SELinux
}

// appArmorSpecInput fills the spec builder's AppArmor inputs for a container of sc:
// whether the kernel enforces AppArmor, shimd's default profile, made sure to be
// loaded when the container will run under it, and that a Localhost profile it asks
// for is loaded.
func (s *confinement) appArmorSpecInput(sc *runtimeapi.LinuxContainerSecurityContext, in *spec.Input) error {
	node := s.node
	in.AppArmorEnabled, in.AppArmorDefault = node.AppArmor, node.AppArmorDefault
	if !node.AppArmor {
		return nil
	}
	if name := spec.AppArmorLocalhostName(sc); name != "" {
		// As containerd's CRI plugin: a profile the node has not loaded fails at
		// create, not as a runc error at start.
		if !appArmorProfileLoaded(appArmorProfiles, name) {
			return invalid("config.linux.security_context.apparmor", "Localhost profile %q is not loaded on this node", name)
		}
	}
	if node.AppArmorDefault != "" && spec.AppArmorUsesDefault(sc) {
		return s.apparmor.ensure(node.AppArmorDefault)
	}
	return nil
}
