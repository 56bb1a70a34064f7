package gubernator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the Gubernator API's metric families, read from Stats.

// Collector returns the server's metrics, read at each scrape:
//
//	dthrottle_gubernator_calls_total{result="ok|too_large"}
//	dthrottle_gubernator_limits_total{result="under_limit|over_limit|error"}
//	dthrottle_gubernator_busy_total           gRPC requests answered RESOURCE_EXHAUSTED over MaxRequests
//	dthrottle_gubernator_connections          gauge, connections open
//	dthrottle_gubernator_connections_accepted_total
//	dthrottle_gubernator_connections_rejected_total  closed over MaxConns
//	dthrottle_gubernator_connections_stalled_total   gRPC, closed: an answer not written within RequestTimeout
//
// It is safe for concurrent use. The daemon registers it only while the
// API is on, so that an API turned off exports no series.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		calls   = metric.Counter("gubernator_calls_total", "GetRateLimits calls to the Gubernator API, over gRPC and HTTP, by result: ok, too_large (more than 1000 rate limits, refused).", "result")
		limits  = metric.Counter("gubernator_limits_total", "Rate limits the Gubernator API answered, by their answer: under_limit, over_limit, error (a bad rate limit, answered with its error).", "result")
		busy    = metric.Counter("gubernator_busy_total", "gRPC requests to the Gubernator API answered RESOURCE_EXHAUSTED at once because its max_requests were in progress.")
		stalled = metric.Counter("gubernator_connections_stalled_total", "Gubernator API gRPC connections closed because an answer could not be written within the request timeout (5 s): the client's flow-control window was spent, or it read nothing.")
		conns   = serve.NewConnFamilies(serve.Naming{Prefix: "gubernator_", Noun: "Gubernator API connections", Open: "open",
			Rejected: "closed at once because its max_conns were open"})
	)
	families := append([]metric.Family{calls, limits, busy, stalled}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		s := stats()
		emit(calls, float64(s.Calls), "ok")
		emit(calls, float64(s.TooLarge), "too_large")
		emit(limits, float64(s.UnderLimit), "under_limit")
		emit(limits, float64(s.OverLimit), "over_limit")
		emit(limits, float64(s.Errors), "error")
		emit(busy, float64(s.Busy))
		emit(stalled, float64(s.Stalled))
		conns.Emit(emit, s.Stats)
	})
}
