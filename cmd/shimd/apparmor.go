package main

import (
	"os"
	"os/exec"

	"github.com/containerd/containerd/v2/contrib/apparmor"
	"github.com/containerd/log"
)

// appArmorDefaultName is shimd's default AppArmor profile: containerd's template
// (contrib/apparmor, Docker's docker-default), under shimd's own name, as
// containerd's CRI plugin loads it as "cri-containerd.apparmor.d" and CRI-O as
// "crio-default".
const appArmorDefaultName = "shimd-default"

// appArmorNode tells whether the kernel enforces AppArmor and, if so, the default
// profile containers that ask RuntimeDefault or nothing run under ("" = none).
func appArmorNode() (enabled bool, defaultProfile string) {
	enabled = appArmorEnabled(os.ReadFile)
	return enabled, appArmorDefaultProfile(enabled, apparmor.LoadDefaultProfile, exec.LookPath)
}

// appArmorEnabled is runc's test (libcontainer/apparmor.IsEnabled): the kernel
// enforces AppArmor. A Localhost profile then needs only to be loaded on the node;
// shimd's default profile needs apparmor_parser too (appArmorDefaultProfile).
func appArmorEnabled(read func(string) ([]byte, error)) bool {
	if os.Getenv("container") != "" {
		return false // in a container, the host's AppArmor is not ours to use
	}
	buf, err := read("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(buf) > 0 && buf[0] == 'Y'
}

// appArmorDefaultProfile loads shimd's default profile at start (load is
// apparmor.LoadDefaultProfile: nothing to do when the kernel has it, else the
// template goes through "apparmor_parser -Kr") and returns its name, or "" when
// containers get none. The decision follows containerd's CRI plugin:
//
//   - no AppArmor in the kernel: "" (nothing to confine with);
//   - loaded, now or before: the name;
//   - not loaded and no apparmor_parser on PATH: "", with a warning. containerd's
//     apparmor.HostSupports is false without the parser, so its RuntimeDefault
//     containers run unconfined there too; refusing them instead would stop every
//     pod of such a node, as most ask for nothing;
//   - the parser there but the load failed: the name, with a warning. Each create
//     that needs the profile tries again and fails with the parser's error
//     (FailedPrecondition), as containerd's does: never unconfined by accident.
func appArmorDefaultProfile(enabled bool, load func(string) error, lookPath func(string) (string, error)) string {
	if !enabled {
		return ""
	}
	l := log.L.WithField("profile", appArmorDefaultName)
	err := load(appArmorDefaultName)
	if err == nil {
		l.Info("AppArmor: the default profile is loaded; containers that ask RuntimeDefault or nothing run under it")
		return appArmorDefaultName
	}
	if _, lerr := lookPath("apparmor_parser"); lerr != nil {
		l.WithError(err).Warn("AppArmor is enabled in the kernel but apparmor_parser is not installed, so shimd cannot " +
			"load its default profile: containers that ask RuntimeDefault or nothing run UNCONFINED " +
			"(install the apparmor package and restart shimd)")
		return ""
	}
	l.WithError(err).Warn("AppArmor: loading the default profile failed; creating a container that needs it will try again and fail until it loads")
	return appArmorDefaultName
}
