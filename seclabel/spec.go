package seclabel

import "github.com/opencontainers/runtime-spec/specs-go"

// SetSpec puts a pod's or container's labels into its OCI spec: the process label
// (none when privileged: it runs under the runtime's own label, as with containerd
// and CRI-O) and the label runc gives the mounts it makes (tmpfs, mqueue). Empty
// labels (no SELinux) set nothing.
func SetSpec(s *specs.Spec, process, mount string, privileged bool) {
	if process != "" && !privileged {
		s.Process.SelinuxLabel = process
	}
	if mount != "" {
		s.Linux.MountLabel = mount
	}
}
