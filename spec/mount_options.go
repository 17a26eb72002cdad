package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// Mount options (CRI Mount.mount_options, VolumeBindMountOptions): per-mount flags
// applied to the bind mount of a volume as OCI mount options. Only flags that narrow
// what the mount allows, or that choose how access times are kept, are accepted;
// every other word is refused, naming why. Each accepted flag also goes in its
// recursive form (runc's "rnoexec": mount_setattr with AT_RECURSIVE) when the OCI
// runtime knows it, so that mounts under the volume's host path are covered too.
var bindMountFlags = map[string]string{
	"noexec": "rnoexec", "nodev": "rnodev", "nosuid": "rnosuid", "nosymfollow": "rnosymfollow",
	"noatime": "rnoatime", "nodiratime": "rnodiratime", "relatime": "rrelatime", "strictatime": "rstrictatime",
	"ro": "", // read-only, as readonly: true (recursive only through recursive_read_only)
}

// refusedMountOptions says why a word that mount(8) knows is not accepted.
var refusedMountOptions = map[string]string{
	"rw": "widens access", "exec": "widens access", "dev": "widens access", "suid": "widens access",
	"symfollow": "widens access", "rrw": "widens access", "rexec": "widens access", "rdev": "widens access",
	"rsuid": "widens access", "rsymfollow": "widens access",
	"shared": "is a propagation: use the mount's propagation field", "rshared": "is a propagation: use the mount's propagation field",
	"slave": "is a propagation: use the mount's propagation field", "rslave": "is a propagation: use the mount's propagation field",
	"private": "is a propagation: use the mount's propagation field", "rprivate": "is a propagation: use the mount's propagation field",
	"unbindable": "is a propagation: use the mount's propagation field", "runbindable": "is a propagation: use the mount's propagation field",
	"bind": "is implied: every CRI mount is a recursive bind mount", "rbind": "is implied: every CRI mount is a recursive bind mount",
	"rro":   "is recursive_read_only: use that field",
	"idmap": "comes from the mount's uidMappings and gidMappings", "ridmap": "comes from the mount's uidMappings and gidMappings",
	"remount": "is not a mount option of a volume", "defaults": "would reset the mount's flags",
}

// CheckMountOption accepts one word of Mount.mount_options; the error says why a
// word is refused.
func CheckMountOption(o string) error {
	if _, ok := bindMountFlags[o]; ok {
		return nil
	}
	if why, ok := refusedMountOptions[o]; ok {
		return fmt.Errorf("%q %s", o, why)
	}
	if strings.HasPrefix(o, "r") {
		if _, ok := bindMountFlags[o[1:]]; ok {
			return fmt.Errorf("%q: give %q; the runtime applies it to mounts under the volume as well", o, o[1:])
		}
	}
	return fmt.Errorf("%q is not a per-mount flag of a bind mount (accepted: %s)", o, strings.Join(acceptedMountOptions(), ", "))
}

func acceptedMountOptions() []string {
	var out []string
	for o := range bindMountFlags {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// mountFlagOptions turns a mount's mount_options into OCI options: each flag, and its
// recursive form where the runtime knows it (known nil: the runtime did not say; the
// plain flags only). A flag the runtime does not know is NotImplemented.
func mountFlagOptions(field string, given, known []string) ([]string, error) {
	var out []string
	for i, o := range given {
		if err := CheckMountOption(o); err != nil {
			return nil, invalid(fmt.Sprintf("%s.mount_options[%d]", field, i), "%v", err)
		}
		if known != nil && !slices.Contains(known, o) {
			return nil, fmt.Errorf("%s.mount_options[%d]: the OCI runtime does not support %q: %w", field, i, o, errdefs.ErrNotImplemented)
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
		if r := bindMountFlags[o]; r != "" && slices.Contains(known, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}
