package gubernator

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{Calls: 40, TooLarge: 2, Busy: 4, Stalled: 7, UnderLimit: 70, OverLimit: 6, Errors: 9,
		Stats: serve.Stats{Active: 3, Accepted: 11, Rejected: 1}}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_gubernator_calls_total", Labels: "result=ok", Kind: counter, Value: 40},
		mt.Sample{Name: "dthrottle_gubernator_calls_total", Labels: "result=too_large", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_gubernator_limits_total", Labels: "result=under_limit", Kind: counter, Value: 70},
		mt.Sample{Name: "dthrottle_gubernator_limits_total", Labels: "result=over_limit", Kind: counter, Value: 6},
		mt.Sample{Name: "dthrottle_gubernator_limits_total", Labels: "result=error", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_gubernator_busy_total", Kind: counter, Value: 4},
		mt.Sample{Name: "dthrottle_gubernator_connections_stalled_total", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_gubernator_connections", Kind: gauge, Value: 3},
		mt.Sample{Name: "dthrottle_gubernator_connections_accepted_total", Kind: counter, Value: 11},
		mt.Sample{Name: "dthrottle_gubernator_connections_rejected_total", Kind: counter, Value: 1},
	)
	if n := len(fams); n != 7 {
		t.Errorf("%d families, want 7", n)
	}
	mt.Lint(t, c)
}
