package httpapi

import (
	"testing"

	"github.com/dthrottle/dthrottle/internal/bucket"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{Allowed: 40, Refused: 5, Charged: 7, Bad: 3, Busy: 4, Stats: serve.Stats{Active: 2, Accepted: 9, Rejected: 1}}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=allowed", Kind: counter, Value: 40},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=refused", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=charged", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=bad", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=busy", Kind: counter, Value: 4},
		mt.Sample{Name: "dthrottle_http_connections", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_http_connections_rejected_total", Kind: counter, Value: 1},
	)
	if n := len(fams); n != 3 {
		t.Errorf("%d families, want 3", n)
	}
	mt.Lint(t, c)
}

// A server's collector reads its live counters.
func TestServerCollector(t *testing.T) {
	s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 1}), Config{Clock: time500s})
	c := dial(t, addr)
	c.get("/v1/allow?tag=a")
	c.get("/v1/allow?tag=a")
	c.get("/v1/allow")
	mt.Expect(t, mt.Gather(t, s.Collector()),
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=allowed", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=refused", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=bad", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_http_connections", Kind: mt.Gauge, Value: 1},
	)
}
