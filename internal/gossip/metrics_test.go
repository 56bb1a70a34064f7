package gossip

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// A node's metrics are its counters, and its parts' are beside them; the
// report's families appear with the first report.
func TestMetrics(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	a := newTestNode(t, net, "a", nil, 1)
	b := newTestNode(t, net, "b", nil, 1)
	mt.Lint(t, a.Collectors()...)
	fams := mt.Gather(t, a.Collectors()...)
	for _, name := range []string{"dthrottle_gossip_report_duration_seconds", "dthrottle_gossip_last_report_timestamp_seconds"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s served before the first report", name)
		}
	}
	a.pending = []Hit{{Key: "x", Count: 3}}
	if err := a.Report(now); err != nil {
		t.Fatal(err)
	}
	if err := b.Report(now); err != nil {
		t.Fatal(err)
	}
	net.Deliver(now)
	a.receiveAll()
	b.receiveAll()
	st := a.Stats()
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, mt.Gather(t, a.Collectors()...),
		mt.Sample{Name: "dthrottle_gossip_packets_sent_total", Kind: counter, Value: float64(st.PacketsSent)},
		mt.Sample{Name: "dthrottle_gossip_bytes_sent_total", Kind: counter, Value: float64(st.BytesSent)},
		mt.Sample{Name: "dthrottle_gossip_packets_received_total", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_gossip_bytes_received_total", Kind: counter, Value: float64(st.BytesReceived)},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=duplicate", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_gossip_peers", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_gossip_last_report_timestamp_seconds", Kind: gauge, Value: float64(now.UnixNano()) / 1e9},
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=sent", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_relay_mode", Labels: "mode=off", Kind: gauge, Value: 1},
	)
	if st.PacketsSent == 0 || st.BytesReceived == 0 {
		t.Errorf("stats %+v: want a datagram sent and one received", st)
	}
}
