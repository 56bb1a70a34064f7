package hapeers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the HAProxy peer's metric families, read from Stats.

// Collector returns the peer's metrics, read at each scrape:
//
//	dthrottle_haproxy_updates_total             entry updates taken
//	dthrottle_haproxy_hits_total                hits charged from the counters
//	dthrottle_haproxy_keys                      gauge, entries remembered
//	dthrottle_haproxy_pushes_total              flag changes pushed
//	dthrottle_haproxy_dropped_total{what="first_seen|bad_key|untracked|push|table"}
//	dthrottle_haproxy_connections               gauge, and its accepted and rejected counters
//	dthrottle_haproxy_connections_closed_total{reason="hello|bad_message"}
//
// It is safe for concurrent use.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		updates = metric.Counter("haproxy_updates_total", "Stick table entry updates taken from HAProxy.")
		hits    = metric.Counter("haproxy_hits_total", "Hits charged from the increases of HAProxy's counters.")
		keys    = metric.Gauge("haproxy_keys", "HAProxy entries remembered (at most haproxy.max_keys).")
		pushes  = metric.Counter("haproxy_pushes_total", "Flag changes pushed to HAProxy.")
		dropped = metric.Counter("haproxy_dropped_total", "What was not taken as it came, by what: first_seen (an entry not known from that HAProxy process, charged at most a burst), bad_key (no tag: empty, a newline or NUL), untracked (max_keys held), push (a flag not queued), table (a definition not followed).", "what")
		conns   = serve.NewConnFamilies(serve.Naming{Prefix: "haproxy_", Noun: "HAProxy peer connections", Open: "open",
			Rejected: "refused because its max_conns were open"})
		closed = metric.Counter("haproxy_connections_closed_total", "HAProxy peer connections ended by dthrottled, by reason: hello (refused at the hello), bad_message (malformed).", "reason")
	)
	families := append([]metric.Family{updates, hits, keys, pushes, dropped, closed}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		s := stats()
		emit(updates, float64(s.Updates))
		emit(hits, float64(s.Hits))
		emit(keys, float64(s.Keys))
		emit(pushes, float64(s.Pushes))
		emit(dropped, float64(s.FirstSeen), "first_seen")
		emit(dropped, float64(s.BadKeys), "bad_key")
		emit(dropped, float64(s.Untracked), "untracked")
		emit(dropped, float64(s.PushesDropped), "push")
		emit(dropped, float64(s.RefusedTables), "table")
		conns.Emit(emit, s.Stats)
		emit(closed, float64(s.BadHellos), "hello")
		emit(closed, float64(s.BadMessages), "bad_message")
	})
}
