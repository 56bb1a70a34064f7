package daemon

import (
	"fmt"
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// wayCharge names the charge socket's way in.
const wayCharge = "charge socket"

// openCharge opens the charge socket, the line protocol's charge form
// ("<n> <tag>" lines, a cost charged after the response), on
// listen.charge_unix and listen.charge_tcp when either is set; it charges
// the daemon's table once Run serves it. The Unix socket takes
// listen.unix_mode and listen.unix_group, and the socket as a whole
// listen.max_conns, as the query socket does. Systemd's socket activation
// passes the query socket only: this one is always opened here. Nothing
// of it changes on reload.
func (d *Daemon) openCharge(cfg config.Config) (*way, error) {
	l := cfg.Listen
	if l.ChargeUnix == "" && l.ChargeTCP == "" {
		return nil, nil
	}
	w := &way{name: wayCharge}
	if l.ChargeUnix != "" {
		ul, lock, err := listenUnix(l.ChargeUnix, cfg.UnixModeBits(), l.UnixGroup)
		if err != nil {
			return nil, fmt.Errorf("%s (listen.charge_unix): %w", wayCharge, err)
		}
		w.listeners, w.lock = append(w.listeners, NamedListener{ul, "unix"}), lock
		d.log.Info(wayCharge, "unix", l.ChargeUnix)
	}
	if l.ChargeTCP != "" {
		tl, err := net.Listen("tcp", l.ChargeTCP)
		if err != nil {
			w.abandon()
			return nil, fmt.Errorf("%s (listen.charge_tcp): listening on tcp %s: %w", wayCharge, l.ChargeTCP, err)
		}
		w.listeners = append(w.listeners, NamedListener{tl, "tcp"})
		d.log.Info(wayCharge, "tcp", tl.Addr().String())
		if ta, ok := tl.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			d.log.Warn(wayCharge+" is reachable from other hosts: anyone who can connect can spend tags", "addr", tl.Addr().String())
		}
	}
	srv := protocol.NewChargeServer(d.table, protocol.Config{MaxConns: l.MaxConns, Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.stats = func(*admin.Snapshot) {} // its counters are on /metrics only
	w.metrics = srv.Collector()
	return w, nil
}

// ChargeAddrs are the addresses the charge socket is served on, none
// when it is off.
func (d *Daemon) ChargeAddrs() []net.Addr {
	w := d.way(wayCharge)
	if w == nil {
		return nil
	}
	out := make([]net.Addr, len(w.listeners))
	for i, l := range w.listeners {
		out[i] = l.Addr()
	}
	return out
}
