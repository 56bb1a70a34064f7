package main

import (
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// notifier tells systemd (Type=notify) what the daemon is doing, over
// NOTIFY_SOCKET. Without NOTIFY_SOCKET every call does nothing.
type notifier struct{ log *slog.Logger }

func (n notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notify failed", "state", state, "err", err)
	}
}

// Ready says the daemon serves, after a start or a reload.
func (n notifier) Ready() { n.send(sd.SdNotifyReady) }

// Reloading says a reload began; systemd wants the monotonic time with it.
func (n notifier) Reloading() {
	n.send(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec())
}

// Stopping says a stop began.
func (n notifier) Stopping() { n.send(sd.SdNotifyStopping) }

// Watchdog feeds systemd's watchdog.
func (n notifier) Watchdog() { n.send(sd.SdNotifyWatchdog) }

// watchdogEvery returns how often to feed the watchdog (half the interval
// systemd set in WATCHDOG_USEC), or 0 when there is none.
func (n notifier) watchdogEvery() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog settings", "err", err)
		return 0
	}
	return d / 2
}
