package rls

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the rate limit service's metric families, read from
// Stats.

// Collector returns the service's metrics, read at each scrape:
//
//	dthrottle_rls_requests_total{result="ok|over_limit|bad"}
//	dthrottle_rls_descriptors_total{result="ok|over_limit|charged"}
//	dthrottle_rls_connections                 gauge, connections open
//	dthrottle_rls_connections_accepted_total
//	dthrottle_rls_connections_rejected_total  closed over MaxConns
//	dthrottle_rls_connections_stalled_total   closed: an answer not written within RequestTimeout
//	dthrottle_rls_busy_total                  requests answered RESOURCE_EXHAUSTED over MaxRequests
//
// It is safe for concurrent use. The daemon registers it only while the
// service is on, so that a service turned off exports no series.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		requests    = metric.Counter("rls_requests_total", "ShouldRateLimit requests to the rate limit service, by result: ok, over_limit, bad (answered INVALID_ARGUMENT). Requests the gRPC server refuses before they are read (too large, not received in time) are not counted.", "result")
		descriptors = metric.Counter("rls_descriptors_total", "Descriptors of the rate limit service's answered requests, by their status: ok, over_limit, charged (a charge applied).", "result")
		conns       = serve.NewConnFamilies(serve.Naming{Prefix: "rls_", Noun: "Rate limit service connections", Open: "open",
			Rejected: "closed at once because its max_conns were open"})
		stalled = metric.Counter("rls_connections_stalled_total", "Rate limit service connections closed because an answer could not be written within the request timeout (5 s): the client's flow-control window was spent, or it read nothing.")
		busy    = metric.Counter("rls_busy_total", "Requests to the rate limit service (of any method) answered RESOURCE_EXHAUSTED at once because its max_requests were in progress.")
	)
	families := append([]metric.Family{requests, descriptors, stalled, busy}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		s := stats()
		emit(requests, float64(s.OK), "ok")
		emit(requests, float64(s.OverLimit), "over_limit")
		emit(requests, float64(s.Bad), "bad")
		emit(descriptors, float64(s.DescriptorsOK), "ok")
		emit(descriptors, float64(s.DescriptorsOverLimit), "over_limit")
		emit(descriptors, float64(s.Charges), "charged")
		conns.Emit(emit, s.Stats)
		emit(stalled, float64(s.Stalled))
		emit(busy, float64(s.Busy))
	})
}
