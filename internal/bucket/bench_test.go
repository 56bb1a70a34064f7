package bucket

import (
	"strconv"
	"testing"
	"time"
)

func benchTags(n int) [][]byte {
	tags := make([][]byte, n)
	for i := range tags {
		tags[i] = []byte("203.0.113." + strconv.Itoa(i))
	}
	return tags
}

// served reports the fraction of a benchmark's decisions that were
// served, so that its output shows which branch it timed.
func served(b *testing.B, ok, all int) {
	b.ReportMetric(float64(ok)/float64(max(all, 1)), "served/op")
}

// BenchmarkAllowServed is the served branch for tags already tracked: one
// token taken and one unreported hit counted, the cost the daemon adds to
// a query it serves. The clock moves one token's time per query (rate
// 1e9/s), so every query finds a token; served/op shows it.
func BenchmarkAllowServed(b *testing.B) {
	for _, n := range []int{1, 10000, 1000000} {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb := newTestTable(b, Policy{Rate: 1e9, Burst: 1000}, 2*n)
			tags := benchTags(n)
			now := time.Unix(1e9, 0)
			for _, tag := range tags {
				tb.Allow(now, tag)
			}
			b.ReportAllocs()
			ok, i := 0, 0
			for b.Loop() {
				now = now.Add(time.Nanosecond)
				if tb.Allow(now, tags[i]) {
					ok++
				}
				if i++; i == n {
					i = 0
				}
			}
			served(b, ok, b.N)
		})
	}
}

// BenchmarkAllowRefused is the refused branch: tags already tracked, with
// no token left and a clock that does not move, so nothing changes. It is
// what a client over its limit costs.
func BenchmarkAllowRefused(b *testing.B) {
	for _, n := range []int{1, 10000, 1000000} {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb := newTestTable(b, Policy{Rate: 1, Burst: 1}, 2*n)
			tags := benchTags(n)
			now := time.Unix(1e9, 0)
			for _, tag := range tags {
				tb.Allow(now, tag)
			}
			b.ReportAllocs()
			ok, i := 0, 0
			for b.Loop() {
				if tb.Allow(now, tags[i]) {
					ok++
				}
				if i++; i == n {
					i = 0
				}
			}
			served(b, ok, b.N)
		})
	}
}

// BenchmarkAllowParallel is the served branch under concurrent
// connections: every CPU asks the same table, each with its own clock
// moving one token's time per query.
func BenchmarkAllowParallel(b *testing.B) {
	const n = 10000
	tb := newTestTable(b, Policy{Rate: 1e9, Burst: 1000}, 2*n)
	tags := benchTags(n)
	start := time.Unix(1e9, 0)
	for _, tag := range tags {
		tb.Allow(start, tag)
	}
	var okAll, all int64
	done := make(chan [2]int64, 64)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now, ok, k, i := start, int64(0), int64(0), 0
		for pb.Next() {
			now = now.Add(time.Nanosecond)
			if tb.Allow(now, tags[i%n]) {
				ok++
			}
			k++
			i += 7
		}
		done <- [2]int64{ok, k}
	})
	close(done)
	for d := range done {
		okAll, all = okAll+d[0], all+d[1]
	}
	served(b, int(okAll), int(all))
}

// BenchmarkSpend applies one remote hit to a tag already tracked, one
// call per hit (BenchmarkSpendReport compares whole reports): the branch
// that adds one token's time to the bucket. The clock moves one token's
// time per hit, so the buckets stay clear of the cap on debt.
func BenchmarkSpend(b *testing.B) {
	const n = 10000
	tb := newTestTable(b, Policy{Rate: 1e6, Burst: 1000}, 2*n)
	keys := make([]string, n)
	for i, tag := range benchTags(n) {
		keys[i] = string(tag)
	}
	now := time.Unix(1e9, 0)
	for _, k := range keys {
		tb.Spend(now, k, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		tb.Spend(now, keys[i], 1)
		if i++; i == n {
			i = 0
		}
	}
	if st := tb.Stats(); st.Tags != n {
		b.Fatalf("%d tags tracked, want %d: the hits did not all go to tracked tags", st.Tags, n)
	}
}
