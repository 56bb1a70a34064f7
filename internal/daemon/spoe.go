package daemon

import (
	"context"
	"fmt"
	"net"

	"github.com/dthrottle/dthrottle/config"
	"github.com/dthrottle/dthrottle/spoe"
)

// spoeRun is the SPOE agent while it runs: the server, its listener, and
// the release of a Unix socket's lock.
type spoeRun struct {
	srv    *spoe.Server
	l      net.Listener
	unlock func()
}

// openSPOE opens the SPOE agent's listener when spoe.listen is set; it
// answers from the daemon's table once Run serves it. A Unix socket takes
// listen.unix_mode and listen.unix_group.
func (d *Daemon) openSPOE(cfg config.Config) error {
	if cfg.SPOE.Listen == "" {
		return nil
	}
	r := &spoeRun{}
	network, addr := cfg.SPOE.Network()
	var err error
	if r.l, r.unlock, err = d.listenEndpoint("spoe agent", network, addr, cfg); err != nil {
		return err
	}
	sc := spoe.Config{MaxConns: cfg.SPOE.MaxConns, Logger: d.log}
	if d.ownClock {
		sc.Clock = d.now
	}
	r.srv = spoe.New(d.table, sc)
	d.spoe = r
	d.log.Info("spoe agent", network, r.l.Addr().String())
	return nil
}

// serveSPOE serves the agent until stopSPOE.
func (d *Daemon) serveSPOE() {
	if d.spoe == nil {
		return
	}
	go func() {
		if err := d.spoe.srv.Serve(d.spoe.l); err != nil {
			d.failed <- fmt.Errorf("spoe agent: %w", err)
		}
	}()
}

// stopSPOE stops taking connections and lets each answer the frames it
// has read, until ctx ends; then a Unix socket's lock is released. Safe to
// call twice, and before serveSPOE.
func (d *Daemon) stopSPOE(ctx context.Context) {
	if d.spoe == nil {
		return
	}
	if err := d.spoe.srv.Shutdown(ctx); err != nil {
		d.log.Warn("stop: spoe connections still answering were cut off", "err", err)
	}
	d.spoe.l.Close()
	d.spoe.unlock()
	d.spoe.unlock = func() {}
}

// SPOEAddr is the SPOE agent's address, nil when it is off.
func (d *Daemon) SPOEAddr() net.Addr {
	if d.spoe == nil {
		return nil
	}
	return d.spoe.l.Addr()
}

// SPOEStats are the SPOE agent's counters; zero when it is off.
func (d *Daemon) SPOEStats() spoe.Stats {
	if d.spoe == nil {
		return spoe.Stats{}
	}
	return d.spoe.srv.Stats()
}
