package daemon

import (
	"net"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/ways/gubernator"
)

// wayGubernator names Gubernator's API's way in.
const wayGubernator = "gubernator api"

// openGubernator opens Gubernator's API when gubernator.grpc or
// gubernator.http is set: one server for both listeners, deciding from
// the daemon's table under the limits its callers state once Run serves
// it. Nothing in it changes on reload.
func (d *Daemon) openGubernator(cfg config.Config) (_ *way, err error) {
	g := cfg.Gubernator
	if g.GRPC == "" && g.HTTP == "" {
		return nil, nil
	}
	w := &way{name: wayGubernator}
	defer func() {
		if err != nil {
			w.abandon()
		}
	}()
	var advertise string
	for _, l := range []struct{ key, addr string }{{"gubernator.grpc", g.GRPC}, {"gubernator.http", g.HTTP}} {
		if l.addr == "" {
			continue
		}
		o, err := d.openEndpoint(wayGubernator, l.key, "tcp", l.addr, cfg)
		if err != nil {
			return nil, err
		}
		nl := o.listeners[0]
		if l.key == "gubernator.grpc" {
			advertise = nl.Addr().String()
			nl.Listener = gubernator.GRPCListener(nl.Listener)
		}
		w.listeners = append(w.listeners, nl)
	}
	srv := gubernator.New(d.table, gubernator.Config{MaxConns: g.MaxConns, MaxRequests: g.MaxRequests,
		Peers: func() int { return len(d.peers()) }, Advertise: advertise, Clock: d.now, Logger: d.log})
	w.srv = srv.Server
	w.stats = func(*admin.Snapshot) {} // its counters are on /metrics only
	w.metrics = srv.Collector()
	d.log.Info(wayGubernator, "grpc", addrString(gubernatorAddr(w, true)), "http", addrString(gubernatorAddr(w, false)))
	return w, nil
}

// gubernatorAddr is the address of w's gRPC listener (grpc true) or its
// HTTP one, nil when it is off.
func gubernatorAddr(w *way, grpc bool) net.Addr {
	if w == nil {
		return nil
	}
	for _, l := range w.listeners {
		if gubernator.IsGRPC(l.Listener) == grpc {
			return l.Addr()
		}
	}
	return nil
}

// addrString is a's address, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// GubernatorGRPCAddr is the address of Gubernator's gRPC service, nil
// when it is off.
func (d *Daemon) GubernatorGRPCAddr() net.Addr { return gubernatorAddr(d.way(wayGubernator), true) }

// GubernatorHTTPAddr is the address of Gubernator's HTTP gateway, nil
// when it is off.
func (d *Daemon) GubernatorHTTPAddr() net.Addr { return gubernatorAddr(d.way(wayGubernator), false) }
