package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/cgroup"
	"github.com/shimd/shimd/ctrd"
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

// removeLater deletes c from containerd with its directories, again and again until
// it succeeds (Options.Cleanups): the delete just failed (a shim still busy,
// containerd away).
func (s *Manager) removeLater(c *Container) {
	if s.opts.Cleanups == nil {
		return
	}
	s.opts.Cleanups.Add("container "+c.ID, func(ctx context.Context) error {
		if err := s.deleteContainerd(ctx, c); err != nil {
			return err
		}
		os.RemoveAll(s.dirs.containerDir(c.ID))
		os.RemoveAll(s.dirs.fifoDir(c.ID))
		return nil
	})
}

// deleteContainerd deletes the containerd container, its writable layer and its
// record in the sandbox store (exit_keep.go, after the task); a missing one is fine.
func (s *Manager) deleteContainerd(ctx context.Context, c *Container) error {
	if err := s.deleteContainerdContainer(ctx, c); err != nil {
		return err
	}
	return s.keeper.release(ctx, c.ID)
}

// deleteContainerdContainer is deleteContainerd but for the sandbox store's record.
// A split writable layer (writable.go) goes after the container that mounts it.
func (s *Manager) deleteContainerdContainer(ctx context.Context, c *Container) error {
	if err := s.deleteContainerdRecord(ctx, c); err != nil {
		return err
	}
	return removeWritableDir(c)
}

func (s *Manager) deleteContainerdRecord(ctx context.Context, c *Container) error {
	if !c.taskDeleted.Load() {
		if err := s.gates.deleting(c.SandboxID, func() error { return ctrd.DeleteExitedTask(ctx, s.ctrd.TaskService(), c.ID) }); err != nil {
			return fmt.Errorf("delete task of container %s: %w", c.ID, err)
		}
	}
	// runc removes the cgroup with the task, unless a crash cut it short.
	if err := cgroup.Remove(s.cgroupDir(ctx, c)); err != nil {
		log.G(ctx).WithError(err).WithField("container", c.ID).Warn("remove cgroup")
	}
	if c.Snapshotter != "" {
		// The writable layer's key is the container's id; the record goes after it,
		// as the client's WithSnapshotCleanup does, without reading it again.
		err := s.ctrd.SnapshotService(c.Snapshotter).Remove(ctx, c.ID)
		if err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete writable layer of container %s: %w", c.ID, err)
		}
		if err == nil {
			if err := s.ctrd.ContainerService().Delete(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("delete container %s: %w", c.ID, err)
			}
			return nil
		}
	}
	// No layer where the record says: the client's way, from containerd's record.
	cc, err := s.ctrd.LoadContainer(ctx, c.ID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := cc.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", c.ID, err)
	}
	return nil
}

// deleteTask kills and deletes the container's task; a missing one is fine.
func (s *Manager) deleteTask(ctx context.Context, id string) error {
	return ctrd.KillDeleteTask(ctx, s.ctrd.TaskService(), id)
}

// cgroupDir is the container's cgroup (see sandbox.CgroupDir), from its pod's config
// or, when the pod is gone, from the spec containerd holds.
func (s *Manager) cgroupDir(ctx context.Context, c *Container) string {
	if sb, err := s.opts.Pods.Pod(c.SandboxID); err == nil {
		return cgroup.Dir(sb.Config.GetLinux().GetCgroupParent(), c.ID, s.opts.CgroupDriver, s.opts.Namespace)
	}
	if s.opts.CgroupDriver == "systemd" {
		return ""
	}
	cc, err := s.ctrd.LoadContainer(ctx, c.ID)
	if err != nil {
		return ""
	}
	sp, err := cc.Spec(ctx)
	if err != nil || sp.Linux == nil {
		return ""
	}
	return sp.Linux.CgroupsPath
}

// fifoDir is where the stdio FIFOs of a container live.
func (d dirs) fifoDir(id string) string {
	return filepath.Join(d.state, containerFIFODirName, id)
}
