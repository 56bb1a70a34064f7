package protocol

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{Stats: serve.Stats{Active: 3, Accepted: 10, Rejected: 1}, Queries: 100, LineTooLong: 2}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_requests_total", Kind: counter, Value: 100},
		mt.Sample{Name: "dthrottle_lines_too_long_total", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_connections", Kind: gauge, Value: 3},
		mt.Sample{Name: "dthrottle_connections_accepted_total", Kind: counter, Value: 10},
		mt.Sample{Name: "dthrottle_connections_rejected_total", Kind: counter, Value: 1},
	)
	if n := len(fams); n != 5 {
		t.Errorf("%d families, want 5", n)
	}
	mt.Lint(t, c)
}

// A server's collector reads its live counters.
func TestServerCollector(t *testing.T) {
	ts := startServer(t, newCountDecider(), Config{}, "tcp")
	c := dial(t, ts.addr(0))
	for _, tag := range []string{"a", "", "b"} {
		query(t, c, tag)
	}
	mt.Expect(t, mt.Gather(t, ts.Collector()),
		mt.Sample{Name: "dthrottle_requests_total", Kind: mt.Counter, Value: 3},
		mt.Sample{Name: "dthrottle_connections", Kind: mt.Gauge, Value: 1},
		mt.Sample{Name: "dthrottle_connections_accepted_total", Kind: mt.Counter, Value: 1},
	)
}
