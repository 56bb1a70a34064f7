package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/httpapi"
)

// wayHTTP names the HTTP decision endpoint's way in.
const wayHTTP = "http endpoint"

// openHTTP opens the HTTP decision endpoint when http.listen is set; it
// answers from, and charges POST /v1/charge to, the daemon's table once
// Run serves it. A Unix socket takes
// listen.unix_mode and listen.unix_group. http.refuse_status changes on
// reload.
func (d *Daemon) openHTTP(cfg config.Config) (*way, error) {
	if cfg.HTTP.Listen == "" {
		return nil, nil
	}
	network, addr := cfg.HTTP.Network()
	w, err := d.openEndpoint(wayHTTP, "http.listen", network, addr, cfg)
	if err != nil {
		return nil, err
	}
	srv := httpapi.New(d.table, httpapi.Config{MaxConns: cfg.HTTP.MaxConns, RefuseStatus: cfg.HTTP.RefuseStatus,
		Charger: d.table, Limiter: d.table, Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.reload = func(next config.Config) { srv.SetRefuseStatus(next.HTTP.RefuseStatus) }
	w.stats = func(s *admin.Snapshot) {
		st := srv.Stats()
		s.HTTP = &st
	}
	w.metrics = srv.Collector()
	d.log.Info("http decision endpoint", network, w.addr().String(), "refuse_status", cfg.HTTP.RefuseStatus)
	return w, nil
}

// HTTPAddr is the HTTP decision endpoint's address, nil when it is off.
func (d *Daemon) HTTPAddr() net.Addr { return d.way(wayHTTP).addr() }

// HTTPStats are the HTTP decision endpoint's counters; zero when it is
// off.
func (d *Daemon) HTTPStats() httpapi.Stats {
	var s admin.Snapshot
	if w := d.way(wayHTTP); w != nil {
		w.stats(&s)
		return *s.HTTP
	}
	return httpapi.Stats{}
}
