package client

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// startRealServer serves the daemon's own table and line server, in this
// process, on a Unix socket: what dthrottled runs, without its main.
func startRealServer(b *testing.B) string {
	b.Helper()
	table, err := bucket.New(bucket.Config{
		Default:     bucket.Policy{Name: "default", Rate: 1e9, Burst: 1000000},
		MaxTags:     1000000,
		MaxTagBytes: 256,
	})
	if err != nil {
		b.Fatal(err)
	}
	path := sockPath(b)
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := protocol.NewServer(oneByOne{table}, protocol.Config{})
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	return path
}

// oneByOne hides the table's AllowBatch: the server asks one query at a
// time.
type oneByOne struct{ t *bucket.Table }

func (d oneByOne) Allow(now time.Time, tag []byte) bool { return d.t.Allow(now, tag) }

// benchTags are 10,000 distinct tags.
var benchTags = func() []string {
	tags := make([]string, 10000)
	for i := range tags {
		tags[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return tags
}()

// BenchmarkAllow: one goroutine, one query in flight at a time: the round
// trip through the client. One op is one query.
func BenchmarkAllow(b *testing.B) {
	c := newTestClient(b, startRealServer(b), Config{Timeout: long}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.Allow(ctx, benchTags[i%len(benchTags)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

// BenchmarkAllowParallel: 64 goroutines per CPU asking at once, pipelined
// onto the client's connections, as a busy web server's handlers would.
func BenchmarkAllowParallel(b *testing.B) {
	for _, conns := range []int{1, 2, 4} {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) {
			c := newTestClient(b, startRealServer(b), Config{Timeout: long, Conns: conns}, nil)
			var next atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := next.Add(7919)
				for pb.Next() {
					if _, err := c.Allow(ctx, benchTags[i%uint64(len(benchTags))]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}
