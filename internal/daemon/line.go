package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// wayLine names the line protocol's way in.
const wayLine = "line protocol"

// openLine opens the line protocol's way in: on the listeners systemd
// passed, if any, else on listen.unix and listen.tcp. It is always on.
func (d *Daemon) openLine(cfg config.Config) (*way, error) {
	w := &way{name: wayLine}
	if len(d.passed) > 0 {
		w.listeners = d.passed
		for _, l := range w.listeners {
			d.log.Info("listening on a socket passed by systemd", "name", l.Name, l.Addr().Network(), l.Addr().String())
		}
		d.log.Info("socket activation: listen.unix and listen.tcp are not used")
	} else if err := d.listen(w, cfg.Listen); err != nil {
		return nil, err
	}
	warnFewFiles(cfg.Listen.MaxConns, d.log)
	srv := protocol.NewServer(d.table, protocol.Config{MaxConns: cfg.Listen.MaxConns, Clock: d.now, Logger: d.log})
	d.offerTable(srv)
	w.srv = srv.Server
	w.stats = func(s *admin.Snapshot) { s.Server = srv.Stats() }
	w.metrics = srv.Collector()
	return w, nil
}

// Addrs are the addresses the query protocol is served on.
func (d *Daemon) Addrs() []net.Addr {
	w := d.way(wayLine)
	out := make([]net.Addr, len(w.listeners))
	for i, l := range w.listeners {
		out[i] = l.Addr()
	}
	return out
}
