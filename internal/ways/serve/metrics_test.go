package serve

import (
	"testing"

	"github.com/dthrottle/dthrottle/internal/metric"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

func connCollector(n Naming, st Stats) *metric.Collector {
	f := NewConnFamilies(n)
	return metric.NewCollector(f.Families(), func(emit metric.Emit) { f.Emit(emit, st) })
}

func TestConnFamilies(t *testing.T) {
	st := Stats{Accepted: 7, Rejected: 2, Active: 3}
	n := Naming{Prefix: "x_", Noun: "X connections", Open: "open", Rejected: "refused"}
	fams := mt.Gather(t, connCollector(n, st))
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_x_connections", Kind: mt.Gauge, Value: 3},
		mt.Sample{Name: "dthrottle_x_connections_accepted_total", Kind: mt.Counter, Value: 7},
		mt.Sample{Name: "dthrottle_x_connections_rejected_total", Kind: mt.Counter, Value: 2},
	)
	if len(fams) != 3 {
		t.Errorf("%d families, want 3", len(fams))
	}
	n.NoAccepted = true
	if fams := mt.Gather(t, connCollector(n, st)); len(fams) != 2 {
		t.Errorf("without accepted: %d families, want 2", len(fams))
	}
}

func TestConnFamiliesLint(t *testing.T) {
	mt.Lint(t, connCollector(Naming{Prefix: "x_", Noun: "X connections", Open: "open", Rejected: "refused"}, Stats{}))
}
