package gossip

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/benchdata"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// BenchmarkReceive is the receive path of one report of a million tags,
// as the daemon runs it: datagrams checked and decoded by Node.Receive,
// and their hits applied to a table of a million tags with SpendBatch.
// "today" receives a peer's hits (type 1); "aggregate" a relay's
// aggregate (type 7), of which the node first takes off its own hits
// (a tenth of the tags, as in a segment of ten), which it reported to
// that relay before each aggregate, outside the timing.
func BenchmarkReceive(b *testing.B) {
	hits := benchdata.Hits()
	for _, kind := range []string{"today", "aggregate"} {
		b.Run(kind, func(b *testing.B) {
			table, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 1000}, MaxTags: 2 * benchdata.Tags, MaxTagBytes: 256})
			if err != nil {
				b.Fatal(err)
			}
			var own []Hit
			for i := 0; i < len(hits); i += 10 {
				own = append(own, hits[i])
			}
			reportOwn := false
			n, err := newNode(Config{
				Since: time.Now().Add(-time.Minute),
				Drain: func(d []Hit) []Hit {
					if reportOwn {
						d = append(d, own...)
					}
					return d
				},
				Apply: table.SpendBatch,
				Relay: relay.Config{Mode: relay.Use},
			}, transport.NewMemNetwork(transport.MemConfig{}, nil).Join("receiver"))
			if err != nil {
				b.Fatal(err)
			}
			enc := &wire.Encoder{Node: 7, MaxPacket: testMaxPacket}
			// The relay is heard before the first report goes to it.
			if _, err := enc.EncodeRelay(time.Now(), wire.MsgAggregate, nil, func(p []byte) error {
				n.Receive(transport.Packet{Data: append([]byte(nil), p...), From: "sender", At: time.Now()})
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			var pkts []transport.Packet
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				pkts = pkts[:0]
				now := time.Now()
				emit := func(p []byte) error {
					pkts = append(pkts, transport.Packet{Data: append([]byte(nil), p...), From: "sender", At: now})
					return nil
				}
				if kind == "today" {
					_, err = enc.Encode(now, hits, emit)
				} else {
					reportOwn = true
					_ = n.Report(now) // to the relay, whose address the network does not know
					reportOwn = false
					if st := n.Stats().Relay; st.OwnPending < len(own) {
						b.Fatalf("%d own tags at the relay, want %d", st.OwnPending, len(own))
					}
					_, err = enc.EncodeRelay(now, wire.MsgAggregate, hits, emit)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for _, p := range pkts {
					n.Receive(p)
				}
			}
			if st := n.Stats(); st.TagsReceived < benchdata.Tags {
				b.Fatalf("received %d tags, want at least %d", st.TagsReceived, benchdata.Tags)
			}
			b.ReportMetric(float64(benchdata.Tags)*float64(b.N)/b.Elapsed().Seconds(), "hits/s")
		})
	}
}
