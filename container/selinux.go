package container

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/seclabel"
	"github.com/shimd/shimd/spec"
)

// selinuxSpecInput fills the spec builder's SELinux labels for c: its pod's labels,
// with the fields of c's own SELinuxOptions replacing the pod's (seclabel.Container).
// Nothing without SELinux, nor in a pod in the node's PID or IPC namespace (CRI-O's
// rule; the pod has no labels either).
func (s *confinement) selinuxSpecInput(c *Container, sb pod.Pod, in *spec.Input) error {
	if pod.HostPIDOrIPC(sb.Config) {
		return nil
	}
	l, err := s.labels.Container(seclabel.Labels{Process: sb.ProcessLabel, Mount: sb.MountLabel},
		c.Config.GetLinux().GetSecurityContext().GetSelinuxOptions())
	if err != nil {
		return err
	}
	in.SELinuxProcessLabel, in.SELinuxMountLabel = l.Process, l.Mount
	return nil
}

// relabelMounts gives the host path of each of c's mounts with selinux_relabel its
// mount label, as containerd's CRI plugin does at create, once the spec is built (the
// mounts are then known to be valid). The path is resolved first: a symlink to a
// node directory is refused like the directory itself. Nothing without SELinux.
func (s *confinement) relabelMounts(c *Container, mountLabel string) error {
	if !s.labels.Enabled() || mountLabel == "" {
		return nil
	}
	for i, m := range c.Config.GetMounts() {
		if !m.GetSelinuxRelabel() {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d].host_path", i)
		src, err := filepath.EvalSymlinks(m.GetHostPath())
		if errors.Is(err, fs.ErrNotExist) {
			continue // nothing to label; the create fails on the mount itself
		}
		if err != nil {
			return fmt.Errorf("%s: resolve %q: %w", field, m.GetHostPath(), err)
		}
		if err := s.labels.Relabel(field, src, mountLabel); err != nil {
			return err
		}
	}
	return nil
}
