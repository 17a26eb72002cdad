package container

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/shimd/shimd/spec"
)

// loadSpecFiles reads what the spec builder needs from disk: a Localhost seccomp
// profile, the AppArmor profiles (apparmor.go), the devices the config asks for and,
// for privileged containers, the host's devices.
func (s *Manager) loadSpecFiles(_ context.Context, c *Container, in *spec.Input) error {
	sc := c.Config.GetLinux().GetSecurityContext()
	if profile := spec.SeccompLocalhostPath(sc); profile != "" {
		const field = "config.linux.security_context.seccomp.localhost_ref"
		if !filepath.IsAbs(profile) {
			return invalid(field, "%q must be an absolute path", profile)
		}
		data, err := readSeccompProfile(field, profile)
		if err != nil {
			return err
		}
		in.SeccompLocalhost = data
	}
	if err := s.confine.appArmorSpecInput(sc, in); err != nil {
		return err
	}
	devs, err := spec.ReadDevices(c.Config.GetDevices())
	if err != nil {
		return err
	}
	in.DeviceNodes = devs
	in.DeviceOwnershipFromSecurityContext = s.opts.DeviceOwnershipFromSecurityContext
	if sc.GetPrivileged() {
		devs, err := oci.HostDevices()
		if err != nil {
			return fmt.Errorf("list host devices: %w", err)
		}
		in.HostDevices = devs
	}
	in.AllCapabilities = s.opts.Node.Capabilities
	in.UnifiedCgroups = s.opts.Node.UnifiedCgroups
	in.HugetlbController = s.opts.Node.HugetlbController
	return nil
}

// fifoDir is where the stdio FIFOs of a container live.
func (d dirs) fifoDir(id string) string {
	return filepath.Join(d.state, containerFIFODirName, id)
}
