package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/spoe"
)

// waySPOE names the SPOE agent's way in.
const waySPOE = "spoe agent"

// openSPOE opens the SPOE agent when spoe.listen is set; it answers from
// the daemon's table once Run serves it. A Unix socket takes
// listen.unix_mode and listen.unix_group. Nothing of it changes on reload.
func (d *Daemon) openSPOE(cfg config.Config) (*way, error) {
	if cfg.SPOE.Listen == "" {
		return nil, nil
	}
	network, addr := cfg.SPOE.Network()
	w, err := d.openEndpoint(waySPOE, "spoe.listen", network, addr, cfg)
	if err != nil {
		return nil, err
	}
	srv := spoe.New(d.table, spoe.Config{MaxConns: cfg.SPOE.MaxConns, Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.stats = func(s *admin.Snapshot) {
		st := srv.Stats()
		s.SPOE = &st
	}
	w.metrics = srv.Collector()
	d.log.Info("spoe agent", network, w.addr().String())
	return w, nil
}

// SPOEAddr is the SPOE agent's address, nil when it is off.
func (d *Daemon) SPOEAddr() net.Addr { return d.way(waySPOE).addr() }

// SPOEStats are the SPOE agent's counters; zero when it is off.
func (d *Daemon) SPOEStats() spoe.Stats {
	var s admin.Snapshot
	if w := d.way(waySPOE); w != nil {
		w.stats(&s)
		return *s.SPOE
	}
	return spoe.Stats{}
}
