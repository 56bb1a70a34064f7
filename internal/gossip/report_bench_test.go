package gossip

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"

	"github.com/dthrottle/dthrottle/internal/benchdata"
)

// BenchmarkReportRoundTrip1M is a whole report of a million distinct tags
// end to end, without the network: drained from one table, encoded,
// received by a node and applied to a second table.
func BenchmarkReportRoundTrip1M(b *testing.B) {
	hits := benchdata.Hits()
	newTable := func() *bucket.Table {
		tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 1000}, MaxTags: 2 * benchdata.Tags, MaxTagBytes: 256})
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	src, dst := newTable(), newTable()
	now := time.Now()
	net := transport.NewMemNetwork(transport.MemConfig{}, nil)
	sender, receiver := net.Join("sender"), net.Join("receiver")
	var drained []bucket.Hit
	mk := func(tr transport.Transport, table *bucket.Table) *Node {
		n, err := newNode(Config{
			Drain: func(d []Hit) []Hit {
				drained = table.Drain(drained[:0])
				for _, h := range drained {
					d = append(d, Hit(h))
				}
				return d
			},
			Apply: func(now time.Time, hs []Hit) {
				for _, h := range hs {
					table.Spend(now, h.Key, h.Count)
				}
			},
		}, tr)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	from, to := mk(sender, src), mk(receiver, dst)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, h := range hits {
			src.Allow(now, []byte(h.Key))
		}
		b.StartTimer()
		// Now, not the start: receivers drop reports sent before they started.
		if err := from.Report(time.Now()); err != nil {
			b.Fatal(err)
		}
		net.Deliver(time.Now())
	receive:
		for {
			select {
			case p := <-receiver.Packets():
				to.Receive(p)
			default:
				break receive
			}
		}
	}
	if got := to.Stats().TagsReceived; got < benchdata.Tags {
		b.Fatalf("received %d tags, want at least %d", got, benchdata.Tags)
	}
	b.ReportMetric(float64(benchdata.Tags)*float64(b.N)/b.Elapsed().Seconds(), "tags/s")
}
