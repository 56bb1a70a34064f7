package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/hapeers"
)

// wayHAProxy names the HAProxy peer's way in.
const wayHAProxy = "haproxy peer"

// openHAProxy opens the peer HAProxy's peers section connects to when
// haproxy.listen is set; it charges, and checks, the daemon's table once
// Run serves it. Nothing of it changes on reload.
func (d *Daemon) openHAProxy(cfg config.Config) (*way, error) {
	h := cfg.HAProxy
	if h.Listen == "" {
		return nil, nil
	}
	w, err := d.openEndpoint(wayHAProxy, "haproxy.listen", "tcp", h.Listen, cfg)
	if err != nil {
		return nil, err
	}
	srv := hapeers.New(d.table, hapeers.Config{Name: h.Name, Peers: h.Peers, Tables: h.Tables, Counter: h.Counter,
		Prefix: h.Prefix, MaxKeys: h.MaxKeys, MaxConns: h.MaxConns, CheckInterval: h.CheckInterval.Duration,
		Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.stats = func(*admin.Snapshot) {} // its counters are on /metrics only
	w.metrics = srv.Collector()
	d.log.Info(wayHAProxy, "tcp", w.addr().String(), "name", h.Name, "tables", h.Tables, "counter", h.Counter)
	return w, nil
}

// HAProxyAddr is the HAProxy peer's address, nil when it is off.
func (d *Daemon) HAProxyAddr() net.Addr { return d.way(wayHAProxy).addr() }
