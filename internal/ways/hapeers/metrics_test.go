package hapeers

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

func TestCollector(t *testing.T) {
	st := Stats{Stats: serve.Stats{Accepted: 9, Rejected: 2, Active: 3}, Updates: 100, Hits: 250, FirstSeen: 4, BadKeys: 5,
		Untracked: 6, Pushes: 7, PushesDropped: 8, RefusedTables: 1, BadHellos: 2, BadMessages: 3, Keys: 42}
	c := newCollector(func() Stats { return st })
	fams := mt.Gather(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_haproxy_updates_total", Kind: counter, Value: 100},
		mt.Sample{Name: "dthrottle_haproxy_hits_total", Kind: counter, Value: 250},
		mt.Sample{Name: "dthrottle_haproxy_keys", Kind: gauge, Value: 42},
		mt.Sample{Name: "dthrottle_haproxy_pushes_total", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_haproxy_dropped_total", Labels: "what=first_seen", Kind: counter, Value: 4},
		mt.Sample{Name: "dthrottle_haproxy_dropped_total", Labels: "what=bad_key", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_haproxy_dropped_total", Labels: "what=untracked", Kind: counter, Value: 6},
		mt.Sample{Name: "dthrottle_haproxy_dropped_total", Labels: "what=push", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_haproxy_dropped_total", Labels: "what=table", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_haproxy_connections", Kind: gauge, Value: 3},
		mt.Sample{Name: "dthrottle_haproxy_connections_accepted_total", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_haproxy_connections_rejected_total", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_haproxy_connections_closed_total", Labels: "reason=hello", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_haproxy_connections_closed_total", Labels: "reason=bad_message", Kind: counter, Value: 3},
	)
	mt.Lint(t, c)
}
