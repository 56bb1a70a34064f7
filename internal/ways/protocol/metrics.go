package protocol

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the metric families of the query socket, read from
// Stats, and of the charge socket, read from ChargeStats.

// Collector returns the server's metrics, read at each scrape:
//
//	dthrottle_requests_total                   requests answered, empty tags included
//	dthrottle_lines_too_long_total             connections closed for a line over MaxLine
//	dthrottle_connections                      gauge, connections being served
//	dthrottle_connections_accepted_total
//	dthrottle_connections_rejected_total       closed on arrival over MaxConns
//
// It is safe for concurrent use.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		requests     = metric.Counter("requests_total", "Requests answered on the query socket, empty tags included.")
		linesTooLong = metric.Counter("lines_too_long_total", "Query connections closed for a line over the 64 KiB hard cap.")
		conns        = serve.NewConnFamilies(serve.Naming{Noun: "Query connections", Open: "being served",
			Rejected: "closed on arrival because max_conns were being served"})
	)
	families := append([]metric.Family{requests, linesTooLong}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		st := stats()
		emit(requests, float64(st.Queries))
		emit(linesTooLong, float64(st.LineTooLong))
		conns.Emit(emit, st.Stats)
	})
}

// Collector returns the charge socket's metrics, read at each scrape:
//
//	dthrottle_charge_lines_total{result="ok|bad"}    charge lines answered
//	dthrottle_charge_lines_too_long_total            connections closed for a line over MaxLine
//	dthrottle_charge_connections                     gauge, connections being served
//	dthrottle_charge_connections_accepted_total
//	dthrottle_charge_connections_rejected_total      closed on arrival over MaxConns
//
// The tokens charged are the table's (dthrottle_policy_charged_tokens_total).
// It is safe for concurrent use. The daemon registers it only while the
// charge socket is on.
func (s *ChargeServer) Collector() prometheus.Collector { return newChargeCollector(s.Stats) }

// newChargeCollector reads the counters from stats: the seam for tests.
func newChargeCollector(stats func() ChargeStats) prometheus.Collector {
	var (
		lines        = metric.Counter("charge_lines_total", "Lines answered on the charge socket, by result: ok (charged), bad (malformed).", "result")
		linesTooLong = metric.Counter("charge_lines_too_long_total", "Charge connections closed for a line over the 64 KiB hard cap.")
		conns        = serve.NewConnFamilies(serve.Naming{Prefix: "charge_", Noun: "Charge connections", Open: "being served",
			Rejected: "closed on arrival because max_conns were being served"})
	)
	families := append([]metric.Family{lines, linesTooLong}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		st := stats()
		emit(lines, float64(st.Charged), "ok")
		emit(lines, float64(st.Bad), "bad")
		emit(linesTooLong, float64(st.LineTooLong))
		conns.Emit(emit, st.Stats)
	})
}
