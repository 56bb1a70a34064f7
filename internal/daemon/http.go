package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/dthrottle/dthrottle/config"
	"github.com/dthrottle/dthrottle/httpapi"
)

// httpRun is the HTTP decision endpoint while it runs: the server, its
// listener, and the release of a Unix socket's lock.
type httpRun struct {
	srv    *httpapi.Server
	l      net.Listener
	unlock func()
}

// openHTTP opens the HTTP decision endpoint's listener when http.listen is
// set; it answers from the daemon's table once Run serves it. A Unix
// socket takes listen.unix_mode and listen.unix_group.
func (d *Daemon) openHTTP(cfg config.Config) error {
	if cfg.HTTP.Listen == "" {
		return nil
	}
	h := &httpRun{}
	network, addr := cfg.HTTP.Network()
	var err error
	if h.l, h.unlock, err = d.listenEndpoint("http endpoint", network, addr, cfg); err != nil {
		return err
	}
	hc := httpapi.Config{MaxConns: cfg.HTTP.MaxConns, RefuseStatus: cfg.HTTP.RefuseStatus, Logger: d.log}
	if d.ownClock {
		hc.Clock = d.now
	}
	h.srv = httpapi.New(d.table, hc)
	d.http = h
	d.log.Info("http decision endpoint", network, h.l.Addr().String(), "refuse_status", cfg.HTTP.RefuseStatus)
	return nil
}

// serveHTTP serves the endpoint until stopHTTP.
func (d *Daemon) serveHTTP() {
	if d.http == nil {
		return
	}
	go func() {
		if err := d.http.srv.Serve(d.http.l); err != nil {
			d.failed <- fmt.Errorf("http endpoint: %w", err)
		}
	}()
}

// stopHTTP stops taking requests and waits, until ctx ends, for those
// being answered; then the listener is closed and a Unix socket's lock
// released. Safe to call twice, and before serveHTTP.
func (d *Daemon) stopHTTP(ctx context.Context) {
	if d.http == nil {
		return
	}
	if err := d.http.srv.Shutdown(ctx); err != nil {
		d.log.Warn("stop: http requests still being answered were cut off", "err", err)
	}
	if err := d.http.l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		d.log.Warn("closing the http listener", "err", err)
	}
	d.http.unlock()
	d.http.unlock = func() {}
}

// HTTPAddr is the HTTP decision endpoint's address, nil when it is off.
func (d *Daemon) HTTPAddr() net.Addr {
	if d.http == nil {
		return nil
	}
	return d.http.l.Addr()
}

// HTTPStats are the HTTP decision endpoint's counters; zero when it is
// off.
func (d *Daemon) HTTPStats() httpapi.Stats {
	if d.http == nil {
		return httpapi.Stats{}
	}
	return d.http.srv.Stats()
}
