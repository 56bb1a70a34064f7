package state

import (
	"testing"
	"time"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// A file read back has its load metrics; an ignored one says why; no
// file configured sends nothing.
func TestCollector(t *testing.T) {
	st, on := Stats{Loaded: true, Load: Info{Tags: 1000, Adopted: 900, Bytes: 21000,
		Duration: 2 * time.Millisecond, Age: 90 * time.Second}}, true
	c := NewCollector(func() (Stats, bool) { return st, on })
	fams := mt.Gather(t, c)
	const gauge = mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_state_load_tags", Kind: gauge, Value: 1000},
		mt.Sample{Name: "dthrottle_state_load_bytes", Kind: gauge, Value: 21000},
		mt.Sample{Name: "dthrottle_state_load_duration_seconds", Kind: gauge, Value: 0.002},
		mt.Sample{Name: "dthrottle_state_load_age_seconds", Kind: gauge, Value: 90},
	)
	if _, ok := fams["dthrottle_state_ignored"]; ok {
		t.Error("dthrottle_state_ignored served for a file read back")
	}
	mt.Lint(t, c)

	st = Stats{Ignored: "stale"}
	fams = mt.Gather(t, c)
	mt.Expect(t, fams, mt.Sample{Name: "dthrottle_state_ignored", Labels: "reason=stale", Kind: gauge, Value: 1})
	if _, ok := fams["dthrottle_state_load_tags"]; ok {
		t.Error("dthrottle_state_load_tags served for an ignored file")
	}

	st, on = Stats{Loaded: true, Load: Info{Tags: 1}}, false
	mt.Absent(t, mt.Gather(t, c), "dthrottle_state_")
}
