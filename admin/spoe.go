package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/spoe"
)

// spoeFamilies are the SPOE agent's metrics, sent only while it is on.
type spoeFamilies struct {
	messages, frames, connections, accepted, rejected, closed family
}

func newSPOEFamilies() spoeFamilies {
	const (
		counter = prometheus.CounterValue
		gauge   = prometheus.GaugeValue
	)
	return spoeFamilies{
		messages:    newFamily("spoe_messages_total", "SPOE messages, by result: allowed, refused, bad (not decided: no tag, a bad cost, no room in the ACK).", counter, "result"),
		frames:      newFamily("spoe_frames_total", "SPOE frames received from HAProxy, by type: notify, other (hellos, disconnects, unknown).", counter, "type"),
		connections: newFamily("spoe_connections", "SPOE agent connections open.", gauge),
		accepted:    newFamily("spoe_connections_accepted_total", "SPOE agent connections taken into service.", counter),
		rejected:    newFamily("spoe_connections_rejected_total", "SPOE agent connections refused because its max_conns were open.", counter),
		closed:      newFamily("spoe_connections_closed_total", "SPOE agent connections closed by the agent, by reason: bad_frame (malformed, fragmented or out of place), too_big (over the agreed frame size), timeout (a slow hello or frame, or idle), write (answers not written in time), health_check (answered).", counter, "reason"),
	}
}

func (f spoeFamilies) all() []family {
	return []family{f.messages, f.frames, f.connections, f.accepted, f.rejected, f.closed}
}

// collect emits s.
func (f spoeFamilies) collect(s *spoe.Stats, emit func(family, float64, ...string)) {
	emit(f.messages, float64(s.Allowed), "allowed")
	emit(f.messages, float64(s.Refused), "refused")
	emit(f.messages, float64(s.Bad), "bad")
	emit(f.frames, float64(s.Notifies), "notify")
	emit(f.frames, float64(s.Frames-min(s.Notifies, s.Frames)), "other")
	emit(f.connections, float64(s.Active))
	emit(f.accepted, float64(s.Accepted))
	emit(f.rejected, float64(s.Rejected))
	emit(f.closed, float64(s.BadFrames), "bad_frame")
	emit(f.closed, float64(s.TooBig), "too_big")
	emit(f.closed, float64(s.Timeouts), "timeout")
	emit(f.closed, float64(s.WriteErrors), "write")
	emit(f.closed, float64(s.HealthChecks), "health_check")
}
