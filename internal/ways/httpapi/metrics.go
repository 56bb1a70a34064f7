package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the HTTP decision endpoint's metric families, read from
// Stats.

// Collector returns the endpoint's metrics, read at each scrape:
//
//	dthrottle_http_requests_total{result="allowed|refused|charged|bad|busy"}
//	dthrottle_http_connections                 gauge, connections open
//	dthrottle_http_connections_rejected_total  refused over MaxConns
//
// It is safe for concurrent use. The daemon registers it only while the
// endpoint is on, so that an endpoint turned off exports no series.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		requests = metric.Counter("http_requests_total", "Requests to the HTTP decision endpoint, by result: allowed (2xx), refused, charged (POST /v1/charge, 204), bad (4xx for their form or a stated limit the policy refuses), busy (503: a stated limit the table had no room for).", "result")
		conns    = serve.NewConnFamilies(serve.Naming{Prefix: "http_", Noun: "HTTP decision endpoint connections", Open: "open",
			Rejected: "refused because its max_conns were open: answered 503, or closed at once past 64 such answers in flight", NoAccepted: true})
	)
	families := append([]metric.Family{requests}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		st := stats()
		emit(requests, float64(st.Allowed), "allowed")
		emit(requests, float64(st.Refused), "refused")
		emit(requests, float64(st.Charged), "charged")
		emit(requests, float64(st.Bad), "bad")
		emit(requests, float64(st.Busy), "busy")
		conns.Emit(emit, st.Stats)
	})
}
