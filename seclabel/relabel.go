package seclabel

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/selinux/go-selinux/label"
)

// refused are the host paths no mount may have relabelled: relabelling them for one
// pod would lock the node's own services out of them. go-selinux refuses the same
// (and the home of $HOME and $SUDO_USER); the list here makes the refusal an
// InvalidArgument before any file is touched.
var refused = map[string]bool{
	"/": true, "/bin": true, "/boot": true, "/dev": true, "/etc": true, "/etc/passwd": true,
	"/etc/pki": true, "/etc/shadow": true, "/home": true, "/lib": true, "/lib64": true,
	"/media": true, "/opt": true, "/proc": true, "/root": true, "/run": true, "/sbin": true,
	"/srv": true, "/sys": true, "/tmp": true, "/usr": true, "/var": true, "/var/lib": true,
	"/var/log": true,
}

// RefusedPath tells whether relabelling host path p is refused (p absolute).
func RefusedPath(p string) bool { return refused[filepath.Clean(p)] }

// Relabel gives the host path of a mount with selinux_relabel, and everything under
// it, the mount label of its pod or container, as containerd and CRI-O do for a
// private (":Z") volume. A filesystem without SELinux labels (ENOTSUP: tmpfs without
// xattrs, NFS) is left as it is, as containerd does. Nothing happens when SELinux is
// off. A refused path is an InvalidArgument naming field.
func (l *Labeler) Relabel(field, path, mountLabel string) error {
	if !l.Enabled() || mountLabel == "" {
		return nil
	}
	if RefusedPath(path) {
		return fmt.Errorf("%s: relabelling %q for a container is refused (SELinux): it belongs to the node: %w",
			field, path, errdefs.ErrInvalidArgument)
	}
	if err := l.chcon(path, mountLabel); err != nil && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("%s: relabel %q with %q: %w", field, path, mountLabel, err)
	}
	return nil
}

// MountData adds the context= option of mountLabel to the data of a mount shimd
// makes itself (the pod's /dev/shm tmpfs), so that every file in it carries the
// pod's label; data unchanged when SELinux is off.
func (l *Labeler) MountData(data, mountLabel string) string {
	if !l.Enabled() {
		return data
	}
	return label.FormatMountLabel(data, mountLabel)
}

// Chcon is for files shimd writes for a pod (hosts, hostname, resolv.conf): they get
// the pod's mount label.
func (l *Labeler) Chcon(path, mountLabel string) error {
	if !l.Enabled() || mountLabel == "" {
		return nil
	}
	if err := l.chcon(path, mountLabel); err != nil && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("label %s with %q: %w", path, mountLabel, err)
	}
	return nil
}
