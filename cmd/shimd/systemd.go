package main

import (
	"context"

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
