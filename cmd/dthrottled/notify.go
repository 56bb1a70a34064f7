package main

import (
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// notifier tells systemd (Type=notify) what the daemon is doing, over
// NOTIFY_SOCKET; without NOTIFY_SOCKET it does nothing. It is the daemon's
// Notifier.
type notifier struct{ log *slog.Logger }

func (n notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notify failed", "state", state, "err", err)
	}
}

func (n notifier) Ready()     { n.send(sd.SdNotifyReady) }
func (n notifier) Reloading() { n.send(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec()) }
func (n notifier) Stopping()  { n.send(sd.SdNotifyStopping) }
func (n notifier) Watchdog()  { n.send(sd.SdNotifyWatchdog) }

// watchdogEvery is half the interval systemd set in WATCHDOG_USEC, or 0.
func (n notifier) watchdogEvery() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog settings", "err", err)
		return 0
	}
	return d / 2
}
