package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/log"
	"github.com/coreos/go-systemd/v22/daemon"
)

// The notifications shimd sends to systemd (Type=notify units): ready once recovery
// has finished, stopping when shutdown begins.
const (
	sdReady    = daemon.SdNotifyReady
	sdStopping = daemon.SdNotifyStopping
)

// notifySystemd sends state to $NOTIFY_SOCKET; without it (not started by systemd)
// it does nothing.
func notifySystemd(ctx context.Context, state string) {
	sent, err := daemon.SdNotify(false, state)
	switch {
	case err != nil:
		log.G(ctx).WithError(err).WithField("state", state).Warn("systemd notification failed")
	case sent:
		log.G(ctx).WithField("state", state).Debug("systemd notified")
	}
}

// systemdRunDir exists when systemd is PID 1 (sd_booted(3)).
var systemdRunDir = "/run/systemd/system"

// checkCgroupDriverHost refuses the systemd cgroup driver where systemd is not
// running: runc would fail every pod at its first cgroup ("dbus: connection
// refused"); saying so at start names the key to change.
func checkCgroupDriverHost(driver string) error {
	if driver != "systemd" {
		return nil
	}
	if st, err := os.Stat(systemdRunDir); err != nil || !st.IsDir() {
		return fmt.Errorf("config key cgroup_driver: %q needs systemd running as PID 1, and this host has none (no %s); "+
			"set cgroup_driver = \"cgroupfs\" (runtimes.NAME.systemd_cgroup follows it)", driver, systemdRunDir)
	}
	return nil
}
