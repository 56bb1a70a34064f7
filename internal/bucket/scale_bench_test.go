package bucket

import (
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// scaleTags returns n distinct 13-byte tags (about an IPv4 address), and
// the same tags again in random order, so no cache learns the order, each
// copied into one buffer in that order, as a server's read buffer holds
// the queries it answers.
func scaleTags(n int) (tags, queries [][]byte) {
	tags = make([][]byte, n)
	for i := range tags {
		tags[i] = []byte("t" + strconv.Itoa(1e11+i*7919))
	}
	buf := make([]byte, 0, 13*n)
	queries = make([][]byte, n)
	for i, o := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		start := len(buf)
		buf = append(buf, tags[o]...)
		queries[i] = buf[start:len(buf):len(buf)]
	}
	return tags, queries
}

// filledTable returns a table already tracking every tag, with room to
// spare so that nothing is evicted (and as many shards as a daemon on
// the default max_tags has), under a policy that serves every
// query: each decision does the full work of a served hit.
func filledTable(b *testing.B, tags [][]byte) *Table {
	tb := newTestTable(b, Policy{Rate: 0.01, Burst: 1e6}, max(2*len(tags), 1<<20))
	now := time.Now()
	for _, tag := range tags {
		tb.Allow(now, tag)
	}
	return tb
}

var scaleSizes = []int{1000, 10000, 100000, 1000000}

// filled caches, by size, the tables and queries of the scale benchmarks,
// which the testing package runs several times over.
var filled = map[int]struct {
	tb      *Table
	queries [][]byte
}{}

// filledQueries returns a table tracking n tags and the tags in random
// order, made once per n.
func filledQueries(b *testing.B, n int) (*Table, [][]byte) {
	f, ok := filled[n]
	if !ok {
		tags, queries := scaleTags(n)
		f.tb, f.queries = filledTable(b, tags), queries
		filled[n] = f
	}
	return f.tb, f.queries
}

// BenchmarkDecision is one decision on a tag already tracked, asked in
// random order over tags of realistic length: the cost the table adds to
// a query, by the number of tags tracked. Every query is served (burst a
// million): it times the served branch, and served/op shows it.
func BenchmarkDecision(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb, queries := filledQueries(b, n)
			now := time.Now()
			b.ReportAllocs()
			ok, i := 0, 0
			for b.Loop() {
				if tb.Allow(now, queries[i]) {
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

// BenchmarkDecisionBatch is BenchmarkDecision through AllowBatch, 64
// queries at a time as a pipelining client sends them, served branch
// (served/op shows it). One op is one decision.
func BenchmarkDecisionBatch(b *testing.B) {
	const batch = 64
	for _, n := range scaleSizes {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb, queries := filledQueries(b, n)
			ok := make([]bool, batch)
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			yes, all := 0, 0
			for i := 0; i < b.N; i += batch {
				j := i % (n - n%batch + batch)
				if j+batch > n {
					j = 0
				}
				tb.AllowBatch(now, queries[j:j+batch], ok)
				for _, o := range ok {
					if o {
						yes++
					}
				}
				all += batch
			}
			b.StopTimer()
			served(b, yes, all)
		})
	}
}

// BenchmarkGC measures full garbage collections with an empty table and
// with a million tags tracked (and nothing else of the benchmark's left on
// the heap), and reports the table's heap per tag and the longest
// stop-the-world pause among those collections. The table's memory is a
// few pointer-free arrays per shard, so the collector has nothing per tag
// to scan: a collection costs about the same with a million tags as with
// none. Run it alone: the other benchmarks' tables would be scanned too.
func BenchmarkGC(b *testing.B) {
	for _, n := range []int{0, 1000000} {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tb := func() *Table {
				_, queries := scaleTags(n)
				return filledTable(b, queries)
			}()
			runtime.GC()
			runtime.ReadMemStats(&after)
			pauses := func() *metrics.Float64Histogram {
				s := []metrics.Sample{{Name: "/gc/pauses:seconds"}}
				metrics.Read(s)
				return s[0].Value.Float64Histogram()
			}
			was := pauses()
			b.ResetTimer()
			for b.Loop() {
				runtime.GC()
			}
			b.StopTimer()
			now, worst := pauses(), 0.0
			for i, c := range now.Counts {
				if c > was.Counts[i] {
					worst = now.Buckets[i+1]
				}
			}
			b.ReportMetric(worst*1e6, "max-pause-µs")
			if n > 0 {
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heap-B/tag")
			}
			if st := tb.Stats(); st.Tags != n {
				b.Fatalf("%d tags tracked, want %d", st.Tags, n)
			}
		})
	}
}

// BenchmarkFlood sends ten million distinct random tags, one query each,
// through a table capped at 100,000 tags, and reports the arena's bytes
// per tag of capacity and the heap per tag of capacity at the end: both
// stay those of a full table however long the flood. Run it with
// -benchtime 1x; one op is one flood.
func BenchmarkFlood(b *testing.B) {
	const maxTags, flood = 100000, 10000000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tb := newTestTable(b, Policy{Rate: 1, Burst: 10}, maxTags)
		perTag := floodTable(tb, flood, 2)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if st := tb.Stats(); st.Tags > maxTags || st.Evictions < flood-maxTags {
			b.Fatalf("after the flood: %+v", st)
		}
		b.ReportMetric(perTag, "arena-B/tag")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/maxTags, "heap-B/tag")
		runtime.KeepAlive(tb)
	}
}

// BenchmarkDrain drains a million tags with one unreported hit each: the
// report's cost on the table's side. One op is one drained tag; the keys
// of a shard share one allocation.
func BenchmarkDrain(b *testing.B) {
	const n = 1000000
	tags, _ := scaleTags(n)
	tb := newTestTable(b, Policy{Rate: 0.01, Burst: 1e6}, 2*n)
	var hits []Hit
	now := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i += n {
		b.StopTimer()
		for _, tag := range tags {
			tb.Allow(now, tag)
		}
		b.StartTimer()
		if hits = tb.Drain(hits[:0]); len(hits) != n {
			b.Fatalf("drained %d tags, want %d", len(hits), n)
		}
	}
}

// BenchmarkDecisionBatchParallel is BenchmarkDecisionBatch from every CPU
// at once over the same table, as the line server's connections ask it:
// each CPU's decisions now find the records, the index slots and the
// shards' locks last written by another CPU. Served branch; one op is one
// decision.
func BenchmarkDecisionBatchParallel(b *testing.B) {
	const batch = 64
	for _, n := range scaleSizes {
		b.Run(strconv.Itoa(n)+"tags", func(b *testing.B) {
			tb, queries := filledQueries(b, n)
			now := time.Now()
			var start atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ok := make([]bool, batch)
				// Each goroutine starts at its own place in the queries.
				j := int(start.Add(int64(n/3))) % n
				for pb.Next() {
					if j%batch == 0 {
						if j+batch > n {
							j = 0
						}
						tb.AllowBatch(now, queries[j:j+batch], ok)
					}
					j++
				}
			})
		})
	}
}
