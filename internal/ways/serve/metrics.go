package serve

import (
	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the connection families every way in exports, read from
// the Stats its Server keeps. Each way names them and words their help;
// the families and the counters behind them are declared here once.

// Naming is how a way in names its connection families and words their
// help: with Prefix "spoe_" and Noun "SPOE agent connections", the
// families are
//
//	dthrottle_spoe_connections                  gauge, Stats.Active: "SPOE agent connections <Open>."
//	dthrottle_spoe_connections_accepted_total   Stats.Accepted: "SPOE agent connections taken into service."
//	dthrottle_spoe_connections_rejected_total   Stats.Rejected: "SPOE agent connections <Rejected>."
//
// The zero Naming is not useful. It is a plain value.
type Naming struct {
	Prefix     string // before "connections": "" for the query socket, "http_", "spoe_"...
	Noun       string // what the help texts count, capitalised: "Query connections"
	Open       string // the gauge's help after Noun, such as "open" or "being served"
	Rejected   string // the rejected counter's help after Noun: why and how they were refused
	NoAccepted bool   // leave out the accepted counter
}

// ConnFamilies are a way's connection families, made by NewConnFamilies.
// The zero ConnFamilies is not usable. It is a plain value, safe to copy
// and to use from several goroutines.
type ConnFamilies struct {
	active, accepted, rejected metric.Family
	withAccepted               bool
}

// NewConnFamilies returns the connection families named by n.
func NewConnFamilies(n Naming) ConnFamilies {
	return ConnFamilies{
		active:       metric.Gauge(n.Prefix+"connections", n.Noun+" "+n.Open+"."),
		accepted:     metric.Counter(n.Prefix+"connections_accepted_total", n.Noun+" taken into service."),
		rejected:     metric.Counter(n.Prefix+"connections_rejected_total", n.Noun+" "+n.Rejected+"."),
		withAccepted: !n.NoAccepted,
	}
}

// Families lists the families, for metric.NewCollector.
func (f ConnFamilies) Families() []metric.Family {
	if !f.withAccepted {
		return []metric.Family{f.active, f.rejected}
	}
	return []metric.Family{f.active, f.accepted, f.rejected}
}

// Emit sends the series of st.
func (f ConnFamilies) Emit(emit metric.Emit, st Stats) {
	emit(f.active, float64(st.Active))
	if f.withAccepted {
		emit(f.accepted, float64(st.Accepted))
	}
	emit(f.rejected, float64(st.Rejected))
}
