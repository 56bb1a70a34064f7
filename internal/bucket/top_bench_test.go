package bucket

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAllowRefusedZipf is the refused branch as a flood looks: tags
// already tracked, no token left, asked with Zipf's law (s = 1.1) over
// 10,000 tags, so a few tags are most of the refusals, as when a few
// clients hammer a limit. served/op shows the branch timed.
func BenchmarkAllowRefusedZipf(b *testing.B) {
	const n = 10000
	tb := newTestTable(b, Policy{Rate: 1, Burst: 1}, 2*n)
	tags := benchTags(n)
	now := time.Unix(1e9, 0)
	for _, tag := range tags {
		tb.Allow(now, tag)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, n-1)
	order := make([][]byte, 1<<16)
	for i := range order {
		order[i] = tags[z.Uint64()]
	}
	b.ReportAllocs()
	ok, i := 0, 0
	for b.Loop() {
		if tb.Allow(now, order[i&(len(order)-1)]) {
			ok++
		}
		i++
	}
	served(b, ok, b.N)
}

// BenchmarkTakeRefusals harvests the refusals of two policies over 64
// distinct keys per shard, as the daemon does once per interval; one op
// is one harvest, the refusals included.
func BenchmarkTakeRefusals(b *testing.B) {
	tb := newTestTable(b, Policy{Rate: 1, Burst: 1}, 1<<20, Policy{Name: "api", Prefix: "api:", Rate: 1, Burst: 1})
	var tags [][]byte
	for i := range 64 * tb.Shards() {
		tags = append(tags, []byte("203.0.113."+strconv.Itoa(i)), []byte("api:"+strconv.Itoa(i)))
	}
	now := time.Unix(1e9, 0)
	var dst []Refusals
	b.ReportAllocs()
	for b.Loop() {
		for _, tag := range tags {
			tb.Allow(now, tag)
		}
		dst, _ = tb.TakeRefusals(dst[:0])
	}
}

// BenchmarkRefusalFlood is a refusal flood spread over a million tracked
// tags in a random order, each refused once a pass, with a harvest
// (TakeRefusals) after each pass, as the daemon harvests once an
// interval: one op is one refusal, its share of the harvest included.
func BenchmarkRefusalFlood(b *testing.B) {
	const n = 1000000
	tb := newTestTable(b, Policy{Rate: 1, Burst: 1}, 2*n)
	tags := benchTags(n)
	now := time.Unix(1e9, 0)
	for _, tag := range tags {
		tb.Allow(now, tag)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
	var dst []Refusals
	b.ReportAllocs()
	ok, i := 0, 0
	for b.Loop() {
		if tb.Allow(now, tags[i]) {
			ok++
		}
		if i++; i == n {
			i = 0
			dst, _ = tb.TakeRefusals(dst[:0])
		}
	}
	served(b, ok, b.N)
}
