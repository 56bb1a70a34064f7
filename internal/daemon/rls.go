package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/rls"
)

// wayRLS names the rate limit service's way in.
const wayRLS = "rate limit service"

// openRLS opens the rate limit service for Envoy when rls.listen is set;
// it decides from, and charges, the daemon's table once Run serves it. A
// Unix socket takes listen.unix_mode and listen.unix_group.
// rls.unmatched and rls.charge_key change on reload.
func (d *Daemon) openRLS(cfg config.Config) (*way, error) {
	if cfg.RLS.Listen == "" {
		return nil, nil
	}
	network, addr := cfg.RLS.Network()
	w, err := d.openEndpoint(wayRLS, "rls.listen", network, addr, cfg)
	if err != nil {
		return nil, err
	}
	srv := rls.New(d.table, rls.Config{MaxConns: cfg.RLS.MaxConns, MaxRequests: cfg.RLS.MaxRequests, UnmatchedOK: cfg.RLS.Unmatched == config.UnmatchedOK,
		ChargeKey: cfg.RLS.ChargeKey, Limiter: d.table, Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.reload = func(next config.Config) {
		srv.SetOptions(next.RLS.Unmatched == config.UnmatchedOK, next.RLS.ChargeKey)
	}
	w.stats = func(*admin.Snapshot) {} // its counters are on /metrics only
	w.metrics = srv.Collector()
	d.log.Info(wayRLS, network, w.addr().String(), "unmatched", cfg.RLS.Unmatched, "charge_key", cfg.RLS.ChargeKey)
	return w, nil
}

// RLSAddr is the rate limit service's address, nil when it is off.
func (d *Daemon) RLSAddr() net.Addr { return d.way(wayRLS).addr() }
