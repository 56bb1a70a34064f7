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

// BenchmarkAllowExisting is the table decision for tags already tracked:
// the cost the daemon adds to each query.
func BenchmarkAllowExisting(b *testing.B) {
	for _, n := range []int{1, 10000, 1000000} {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb := newTestTable(b, Policy{Rate: 1e6, Burst: 1000}, n)
			tags := benchTags(n)
			now := time.Now()
			for _, tag := range tags {
				tb.Allow(now, tag)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tb.Allow(now, tags[i%n])
			}
		})
	}
}

// BenchmarkAllowParallel is the decision under concurrent connections.
func BenchmarkAllowParallel(b *testing.B) {
	const n = 10000
	tb := newTestTable(b, Policy{Rate: 1e6, Burst: 1000}, n)
	tags := benchTags(n)
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tb.Allow(now, tags[i%n])
			i += 7
		}
	})
}

// BenchmarkSpend applies one remote hit to an existing tag.
func BenchmarkSpend(b *testing.B) {
	const n = 10000
	tb := newTestTable(b, Policy{Rate: 1e6, Burst: 1000}, n)
	keys := make([]string, n)
	for i, tag := range benchTags(n) {
		keys[i] = string(tag)
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tb.Spend(now, keys[i%n], 1)
	}
}
