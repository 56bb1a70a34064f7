package bucket

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkViewDecide is one in-process decision from the shared table,
// on known tags, at 10,000 and a million tags: go test ./internal/bucket -run '^$'
// -bench ViewDecide -cpu 1,2. Each thread decides on tags of its own: a
// random share of them (their records lie side by side with the other
// threads', a record being about 40 bytes, so a cache line often holds
// another thread's), and with "apart", the tags whose records were made
// in one stretch, so that threads rarely write the same line; the
// difference is what false sharing of records costs.
func BenchmarkViewDecide(b *testing.B) {
	for _, n := range []int{10000, 1000000} {
		for _, apart := range []bool{false, true} {
			name := fmt.Sprintf("tags=%d", n)
			if apart {
				name += "/apart"
			}
			b.Run(name, func(b *testing.B) { benchViewDecide(b, n, apart) })
		}
	}
}

func benchViewDecide(b *testing.B, n int, apart bool) {
	tb, err := New(Config{Default: Policy{Rate: 1, Burst: 1000000}, MaxTags: 2 * n, MaxTagBytes: 256, Shared: true})
	if err != nil {
		b.Fatal(err)
	}
	v, err := NewView(tb.reg.ro, tb.reg.rw)
	if err != nil {
		b.Fatal(err)
	}
	// The tags in the order their records were made.
	tags := make([][]byte, n)
	now := time.Now()
	for i := range tags {
		tags[i] = fmt.Appendf(nil, "10.%d.%d.%d", i>>16, i>>8&255, i&255)
		tb.Allow(now, tags[i])
	}
	// Each thread's share, in a random order: a caller has the tag it
	// decides in hand (just parsed from its request), so the shares are
	// packed in that order and reading a tag costs no cache miss of its
	// own; the table's lines are what a decision pays for.
	procs := runtime.GOMAXPROCS(0)
	rng := rand.New(rand.NewPCG(1, 2))
	if !apart {
		rng.Shuffle(n, func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
	}
	shares := make([][][]byte, procs)
	packed := make([]byte, 0, 16*n)
	for k := range shares {
		share := tags[k*n/procs : (k+1)*n/procs]
		rng.Shuffle(len(share), func(i, j int) { share[i], share[j] = share[j], share[i] })
		for i, tag := range share {
			packed = append(packed, tag...)
			share[i] = packed[len(packed)-len(tag):]
		}
		shares[k] = share
	}
	tb.Beat(time.Now())
	var next atomic.Int64
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
		share := shares[int(next.Add(1)-1)%procs]
		ns := time.Now().UnixNano()
		var d Decision
		for i, k := 0, 0; pb.Next(); {
			if c := v.DecideInto(ns, share[i], &d); c > OK {
				b.Errorf("not decided in process: %v", c)
				return
			}
			if i++; i == len(share) {
				i = 0
			}
			if k++; k&1023 == 0 {
				ns = time.Now().UnixNano()
			}
		}
	})
}
