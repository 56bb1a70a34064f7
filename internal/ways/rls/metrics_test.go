package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dthrottle/dthrottle/internal/bucket"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{OK: 40, OverLimit: 5, Bad: 3, Busy: 4, Stalled: 7, DescriptorsOK: 70, DescriptorsOverLimit: 6, Charges: 9,
		Stats: serve.Stats{Active: 2, Accepted: 11, Rejected: 1}}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=ok", Kind: counter, Value: 40},
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=over_limit", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=bad", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=ok", Kind: counter, Value: 70},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=over_limit", Kind: counter, Value: 6},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=charged", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_rls_connections", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_rls_connections_accepted_total", Kind: counter, Value: 11},
		mt.Sample{Name: "dthrottle_rls_connections_rejected_total", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_connections_stalled_total", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_rls_busy_total", Kind: counter, Value: 4},
	)
	if n := len(fams); n != 7 {
		t.Errorf("%d families, want 7", n)
	}
	mt.Lint(t, c)
}

// A server's collector reads its live counters.
func TestServerCollector(t *testing.T) {
	s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 1}), Config{Clock: newClock().Now, ChargeKey: DefaultChargeKey})
	c := dial(t, addr)
	c.ask("api", desc("k=a"), desc("k=b", "dthrottle_charge=1"))
	c.ask("api", desc("k=a"))
	c.call(&rlsv3.RateLimitRequest{})
	mt.Expect(t, mt.Gather(t, s.Collector()),
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=ok", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=over_limit", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=bad", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=ok", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=over_limit", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=charged", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_connections", Kind: mt.Gauge, Value: 1},
	)
}
