package spoe

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{Stats: serve.Stats{Accepted: 9, Rejected: 2, Active: 4}, Frames: 120, Notifies: 100, Allowed: 90, Refused: 8,
		Bad: 2, BadFrames: 1, TooBig: 3, Timeouts: 5, WriteErrors: 6, HealthChecks: 7}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_spoe_messages_total", Labels: "result=allowed", Kind: counter, Value: 90},
		mt.Sample{Name: "dthrottle_spoe_messages_total", Labels: "result=refused", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_spoe_messages_total", Labels: "result=bad", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_spoe_frames_total", Labels: "type=notify", Kind: counter, Value: 100},
		mt.Sample{Name: "dthrottle_spoe_frames_total", Labels: "type=other", Kind: counter, Value: 20},
		mt.Sample{Name: "dthrottle_spoe_connections", Kind: gauge, Value: 4},
		mt.Sample{Name: "dthrottle_spoe_connections_accepted_total", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_spoe_connections_rejected_total", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_spoe_connections_closed_total", Labels: "reason=bad_frame", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_spoe_connections_closed_total", Labels: "reason=too_big", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_spoe_connections_closed_total", Labels: "reason=timeout", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_spoe_connections_closed_total", Labels: "reason=write", Kind: counter, Value: 6},
		mt.Sample{Name: "dthrottle_spoe_connections_closed_total", Labels: "reason=health_check", Kind: counter, Value: 7},
	)
	if n := len(fams); n != 6 {
		t.Errorf("%d families, want 6", n)
	}
	mt.Lint(t, c)
}

// A server's collector reads its live counters.
func TestServerCollector(t *testing.T) {
	s, addr := start(t, Config{})
	handshake(t, addr)
	mt.Expect(t, mt.Gather(t, s.Collector()),
		mt.Sample{Name: "dthrottle_spoe_connections", Kind: mt.Gauge, Value: 1},
		mt.Sample{Name: "dthrottle_spoe_connections_accepted_total", Kind: mt.Counter, Value: 1},
	)
}
