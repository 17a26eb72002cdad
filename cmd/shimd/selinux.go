package main

import (
	"github.com/containerd/log"
	"github.com/opencontainers/selinux/go-selinux"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/seclabel"
)

// selinuxNode makes the node's SELinux labeler from enable_selinux and the kernel,
// as containerd's CRI plugin does (internal/cri/server/service_linux.go): on only
// when asked for and the kernel has SELinux; asked for without it, a warning and
// off; off, go-selinux is switched off for the whole process.
func selinuxNode(want bool) (*seclabel.Labeler, container.SELinuxNode) {
	n := container.SELinuxNode{Configured: want, Kernel: selinux.GetEnabled()}
	if n.Kernel {
		n.Enforcing = selinux.EnforceMode() == selinux.Enforcing
	}
	labels := seclabel.New(want)
	switch {
	case want && !n.Kernel:
		log.L.Warn("SELinux: enable_selinux is set but the kernel has no SELinux: pods get no labels")
	case !want && n.Kernel:
		log.L.Info("SELinux: the kernel has SELinux but enable_selinux is false: containers run under shimd's runtime label, volumes are not relabelled")
	case labels.Enabled():
		n.ProcessLabel, n.FileLabel = labels.Defaults()
		l := log.L.WithField("process", n.ProcessLabel).WithField("file", n.FileLabel).WithField("enforcing", n.Enforcing)
		if n.ProcessLabel == "" {
			l.Warn("SELinux: the policy has no contexts/lxc_contexts (process and file entries): containers run under shimd's runtime label")
		} else {
			l.Info("SELinux: each pod gets an MCS level of its own")
		}
	}
	return labels, n
}
