package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkViewDecide is one in-process decision from the shared table,
// on known tags, at 10,000 and a million tags: go test ./bucket -run '^$'
// -bench ViewDecide. With -cpu 1,2 it shows two threads deciding on
// distinct tags.
func BenchmarkViewDecide(b *testing.B) {
	for _, n := range []int{10000, 1000000} {
		b.Run(fmt.Sprintf("tags=%d", n), func(b *testing.B) {
			tb, err := New(Config{Default: Policy{Rate: 1, Burst: 1000000}, MaxTags: 2 * n, MaxTagBytes: 256, Shared: true})
			if err != nil {
				b.Fatal(err)
			}
			v, err := NewView(tb.reg.ro, tb.reg.rw)
			if err != nil {
				b.Fatal(err)
			}
			// The tags in a random order, packed in that order: a caller
			// has the tag it decides in hand (just parsed from its
			// request), so reading it costs no cache miss of its own; the
			// table's lines are what a decision pays for.
			tags := make([][]byte, n)
			now := time.Now()
			for i := range tags {
				tags[i] = fmt.Appendf(nil, "10.%d.%d.%d", i>>16, i>>8&255, i&255)
				tb.Allow(now, tags[i])
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
			packed := make([]byte, 0, 16*n)
			for i, tag := range tags {
				packed = append(packed, tag...)
				tags[i] = packed[len(packed)-len(tag):]
			}
			tb.Beat(time.Now())
			var next atomic.Uint64
			stop := make(chan struct{})
			defer close(stop)
			go func() { // the daemon's heartbeat
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						tb.Beat(time.Now())
					}
				}
			}()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each thread walks the shuffled tags from its own start.
				i := int(next.Add(uint64(n)/7) % uint64(n))
				ns := time.Now().UnixNano()
				k := 0
				for pb.Next() {
					if v.Decide(ns, tags[i]).Code > OK {
						b.Errorf("not decided in process: %v", v.Decide(ns, tags[i]))
						return
					}
					if i++; i == n {
						i = 0
					}
					if k++; k&1023 == 0 {
						ns = time.Now().UnixNano()
					}
				}
			})
		})
	}
}
