package spoe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the SPOE agent's metric families, read from Stats.

// Collector returns the agent's metrics, read at each scrape:
//
//	dthrottle_spoe_messages_total{result="allowed|refused|bad"}
//	dthrottle_spoe_frames_total{type="notify|other"}
//	dthrottle_spoe_connections                 gauge, connections open
//	dthrottle_spoe_connections_accepted_total
//	dthrottle_spoe_connections_rejected_total  refused over MaxConns
//	dthrottle_spoe_connections_closed_total{reason="bad_frame|too_big|timeout|write|health_check"}
//
// It is safe for concurrent use. The daemon registers it only while the
// agent is on, so that an agent turned off exports no series.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Stats) }

// newCollector reads the counters from stats: the seam for tests.
func newCollector(stats func() Stats) prometheus.Collector {
	var (
		messages = metric.Counter("spoe_messages_total", "SPOE messages, by result: allowed, refused, bad (not decided: no tag, a bad cost, no room in the ACK).", "result")
		frames   = metric.Counter("spoe_frames_total", "SPOE frames received from HAProxy, by type: notify, other (hellos, disconnects, unknown).", "type")
		conns    = serve.NewConnFamilies(serve.Naming{Prefix: "spoe_", Noun: "SPOE agent connections", Open: "open",
			Rejected: "refused because its max_conns were open"})
		closed = metric.Counter("spoe_connections_closed_total", "SPOE agent connections closed by the agent, by reason: bad_frame (malformed, fragmented or out of place), too_big (over the agreed frame size), timeout (a slow hello or frame, or idle), write (answers not written in time), health_check (answered).", "reason")
	)
	families := append([]metric.Family{messages, frames, closed}, conns.Families()...)
	return metric.NewCollector(families, func(emit metric.Emit) {
		s := stats()
		emit(messages, float64(s.Allowed), "allowed")
		emit(messages, float64(s.Refused), "refused")
		emit(messages, float64(s.Bad), "bad")
		emit(frames, float64(s.Notifies), "notify")
		emit(frames, float64(s.Frames-min(s.Notifies, s.Frames)), "other")
		conns.Emit(emit, s.Stats)
		emit(closed, float64(s.BadFrames), "bad_frame")
		emit(closed, float64(s.TooBig), "too_big")
		emit(closed, float64(s.Timeouts), "timeout")
		emit(closed, float64(s.WriteErrors), "write")
		emit(closed, float64(s.HealthChecks), "health_check")
	})
}
