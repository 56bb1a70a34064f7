package protocol

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the query socket's metric families, read from Stats.

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
		connections  = metric.Gauge("connections", "Query connections being served.")
		accepted     = metric.Counter("connections_accepted_total", "Query connections taken into service.")
		rejected     = metric.Counter("connections_rejected_total", "Query connections closed on arrival because max_conns were being served.")
	)
	families := []metric.Family{requests, linesTooLong, connections, accepted, rejected}
	return metric.NewCollector(families, func(emit metric.Emit) {
		st := stats()
		emit(requests, float64(st.Queries))
		emit(linesTooLong, float64(st.LineTooLong))
		emit(connections, float64(st.Active))
		emit(accepted, float64(st.Accepted))
		emit(rejected, float64(st.Rejected))
	})
}
