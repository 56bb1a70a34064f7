package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// ways are the ways in, opened in this order at start; each returns nil
// when the config leaves it off. A new way in is a file with its opener
// and one line here.
//
// The line protocol's comes last: a client that finds its Unix socket
// listening (a readiness check, a test) finds every other way's listener
// bound too.
var ways = []func(d *Daemon, cfg config.Config) (*way, error){
	(*Daemon).openHTTP,       // http.go: the HTTP decision endpoint on http.listen
	(*Daemon).openSPOE,       // spoe.go: the SPOE agent on spoe.listen
	(*Daemon).openCharge,     // charge.go: the line protocol's charge form on listen.charge_unix and listen.charge_tcp
	(*Daemon).openRLS,        // rls.go: the rate limit service for Envoy on rls.listen
	(*Daemon).openGubernator, // gubernator.go: Gubernator's API on gubernator.grpc and gubernator.http
	(*Daemon).openHAProxy,    // haproxy.go: the peer of HAProxy's stick tables on haproxy.listen
	(*Daemon).openLine,       // line.go: the line protocol on listen.unix and listen.tcp
}

// way is one way in while the daemon runs: its server, the listeners it
// serves, and what the daemon does with it at reload and for the admin
// endpoint. The loops below are all the daemon knows of a way in.
type way struct {
	name      string        // in logs and errors: "http endpoint"
	srv       *serve.Server // the protocol's server
	listeners []NamedListener
	lock      *fileLock // a Unix socket's lock, let go once its listener is closed; nil without one
	// reload applies a new config's live settings; nil when none apply.
	reload func(next config.Config)
	// stats adds the way's counters to a snapshot.
	stats func(s *admin.Snapshot)
	// metrics are the way's metric families, which the admin endpoint
	// serves (metrics.go).
	metrics prometheus.Collector
}

// openWays opens every way in the config turns on. On error, those opened
// are closed and leave nothing behind.
func (d *Daemon) openWays(cfg config.Config) error {
	for _, open := range ways {
		w, err := open(d, cfg)
		if err != nil {
			d.abandonWays()
			return err
		}
		if w != nil {
			d.ways = append(d.ways, w)
		}
	}
	return nil
}

// serveWays serves every listener of every way in until stopWays; a
// listener that fails is reported on d.failed.
func (d *Daemon) serveWays() {
	for _, w := range d.ways {
		for _, l := range w.listeners {
			go func() {
				if err := w.srv.Serve(l.Listener); err != nil {
					d.failed <- fmt.Errorf("serving %s: %w", l.Addr(), err) // err names the way
				}
			}()
		}
	}
}

// reloadWays applies next to every way in that has live settings.
func (d *Daemon) reloadWays(next config.Config) {
	for _, w := range d.ways {
		if w.reload != nil {
			w.reload(next)
		}
	}
}

// waysStats adds every way in's counters to s.
func (d *Daemon) waysStats(s *admin.Snapshot) {
	for _, w := range d.ways {
		w.stats(s)
	}
}

// stopWays stops every way in at once: they stop accepting, and their
// connections answer what they have read until ctx ends, at most grace; a
// connection still open then is cut off, which is logged, not an error.
// Safe to call twice.
func (d *Daemon) stopWays(ctx context.Context, grace time.Duration) {
	var wg sync.WaitGroup
	for _, w := range d.ways {
		wg.Go(func() {
			if err := w.srv.Shutdown(ctx); err != nil {
				d.log.Warn("stop: connections not reading their replies were cut off", "way", w.name,
					"grace", grace, "connections", w.srv.Stats().Active, "err", err)
			}
		})
	}
	wg.Wait()
}

// closeWays closes every way in's server and listeners (a Unix listener
// this process created removes its socket file), then releases the
// sockets' locks. Safe to call twice.
func (d *Daemon) closeWays() {
	for _, w := range d.ways {
		if w.srv != nil {
			w.srv.Close()
		}
		for _, l := range w.listeners {
			if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				d.log.Warn("closing a listener", "way", w.name, "addr", l.Addr().String(), "err", err)
			}
		}
		w.lock.release()
		w.lock = nil
	}
}

// abandonWays closes every way in after a start that failed: as
// closeWays, but the lock files this process made go too.
func (d *Daemon) abandonWays() {
	for _, w := range d.ways {
		w.abandon()
	}
	d.ways = nil
}

// abandon closes w's server and listeners and removes the lock file this
// process made, after a start that failed.
func (w *way) abandon() {
	if w.srv != nil {
		w.srv.Close()
	}
	for _, l := range w.listeners {
		l.Close()
	}
	w.lock.abandon()
	w.lock = nil
}

// way returns the way in named name, nil when it is off.
func (d *Daemon) way(name string) *way {
	for _, w := range d.ways {
		if w.name == name {
			return w
		}
	}
	return nil
}

// addr is the address of the way's first listener, nil when it is off.
func (w *way) addr() net.Addr {
	if w == nil || len(w.listeners) == 0 {
		return nil
	}
	return w.listeners[0].Addr()
}
