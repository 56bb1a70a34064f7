package relay

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// Relaying has its metrics: mode, relays heard, reports by path, traffic
// by kind and direction, a relay's sums.
func TestMetrics(t *testing.T) {
	st := NodeStats{Mode: "serve", Relays: 1, RemoteRelays: 2, ViaRelays: 10, Direct: 1,
		ToRelayPackets: 3, ToRelayBytes: 300, AggregatePackets: 4, AggregateBytes: 400, CrossingPackets: 5, CrossingBytes: 500,
		ToRelayReceived: 6, ToRelayBytesReceived: 600, AggregatesReceived: 7, AggregateBytesReceived: 700,
		CrossingsReceived: 8, CrossingBytesReceived: 800, ForeignHits: 9, OwnPending: 2, RemoteSilences: 3, CrossingsLost: 4,
		Sum: Stats{HeldTags: 4, HeldHits: 5, HotTags: 6, Passed: 7, Dropped: 8}}
	c := Collector(func() NodeStats { return st })
	mt.Lint(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, mt.Gather(t, c),
		mt.Sample{Name: "dthrottle_relay_mode", Labels: "mode=serve", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_relay_relays", Labels: "where=segment", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_relay_relays", Labels: "where=remote", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_relay_reports_total", Labels: "path=relays", Kind: counter, Value: 10},
		mt.Sample{Name: "dthrottle_relay_reports_total", Labels: "path=direct", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=sent,kind=to_relay", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=sent,kind=crossing", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=received,kind=aggregate", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=received,kind=crossing", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_relay_bytes_total", Labels: "direction=sent,kind=aggregate", Kind: counter, Value: 400},
		mt.Sample{Name: "dthrottle_relay_bytes_total", Labels: "direction=received,kind=to_relay", Kind: counter, Value: 600},
		mt.Sample{Name: "dthrottle_relay_held_tags", Kind: gauge, Value: 4},
		mt.Sample{Name: "dthrottle_relay_held_hits", Kind: gauge, Value: 5},
		mt.Sample{Name: "dthrottle_relay_hot_tags", Kind: gauge, Value: 6},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=passed", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=dropped", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=foreign", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_relay_own_pending_tags", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_relay_remote_silences_total", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_relay_crossings_lost_total", Kind: counter, Value: 4},
	)
}
