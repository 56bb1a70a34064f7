package admin

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/dthrottle/dthrottle/serve"
	"github.com/dthrottle/dthrottle/spoe"
)

func TestSPOEMetrics(t *testing.T) {
	f := newFake()
	if fams := scrape(t, handler(t, f.sources())); fams["dthrottle_spoe_messages_total"] != nil {
		t.Fatal("SPOE metrics while the agent is off")
	}
	f.snap.SPOE = &spoe.Stats{Stats: serve.Stats{Accepted: 9, Rejected: 2, Active: 4}, Frames: 120, Notifies: 100, Allowed: 90, Refused: 8,
		Bad: 2, BadFrames: 1, TooBig: 3, Timeouts: 5, WriteErrors: 6, HealthChecks: 7}
	fams := scrape(t, handler(t, f.sources()))
	const c, g = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	for _, s := range []sample{
		{"dthrottle_spoe_messages_total", "result=allowed", c, 90},
		{"dthrottle_spoe_messages_total", "result=refused", c, 8},
		{"dthrottle_spoe_messages_total", "result=bad", c, 2},
		{"dthrottle_spoe_frames_total", "type=notify", c, 100},
		{"dthrottle_spoe_frames_total", "type=other", c, 20},
		{"dthrottle_spoe_connections", "", g, 4},
		{"dthrottle_spoe_connections_accepted_total", "", c, 9},
		{"dthrottle_spoe_connections_rejected_total", "", c, 2},
		{"dthrottle_spoe_connections_closed_total", "reason=bad_frame", c, 1},
		{"dthrottle_spoe_connections_closed_total", "reason=too_big", c, 3},
		{"dthrottle_spoe_connections_closed_total", "reason=timeout", c, 5},
		{"dthrottle_spoe_connections_closed_total", "reason=write", c, 6},
		{"dthrottle_spoe_connections_closed_total", "reason=health_check", c, 7},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
}
