package bucket

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSpendBatchMatchesSpend applies random reports to two tables, one hit
// at a time and a report at a time, with and without looking ahead, on
// tables that evict and tables that do not: every bucket, the counts and
// the hits left to report must agree.
func TestSpendBatchMatchesSpend(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		for _, maxTags := range []int{8, 5000} {
			t.Run(fmt.Sprintf("look-ahead=%v/max-tags=%d", ahead, maxTags), func(t *testing.T) {
				forceLookAhead(t, ahead)
				policies := []Policy{{Prefix: "ok:", Action: Allow}, {Prefix: "api:", Rate: 2, Burst: 5}}
				one := newTestTable(t, Policy{Rate: 1, Burst: 3}, maxTags, policies...)
				batched := newTestTable(t, Policy{Rate: 1, Burst: 3}, maxTags, policies...)
				sameSeed(batched, one)
				rng := rand.New(rand.NewPCG(31, 32))
				distinct := 3 * maxTags
				key := func() string {
					switch rng.IntN(10) {
					case 0:
						return ""
					case 1:
						return "ok:" + strconv.Itoa(rng.IntN(5))
					case 2:
						return "api:" + strconv.Itoa(rng.IntN(distinct))
					}
					return "t" + strconv.Itoa(rng.IntN(distinct))
				}
				for step := 0; step < 200; step++ {
					now := at(float64(step) / 50)
					hits := make([]Hit, rng.IntN(600)) // over spendMax: several passes
					for i := range hits {
						hits[i] = Hit{Key: key(), Count: uint32(rng.IntN(4))}
					}
					// Local queries in between, so that some buckets have
					// unreported hits and eviction has choices to make.
					for range 20 {
						tag := []byte(key())
						if one.Allow(now, tag) != batched.Allow(now, tag) {
							t.Fatalf("step %d: the tables answer %q differently", step, tag)
						}
					}
					batched.SpendBatch(now, hits)
					for _, h := range hits {
						one.Spend(now, h.Key, h.Count)
					}
					for i := range 30 {
						k := "t" + strconv.Itoa(i)
						a, errA := one.Peek(now, k)
						b, errB := batched.Peek(now, k)
						if a != b || (errA == nil) != (errB == nil) {
							t.Fatalf("step %d: %s is %+v (%v) one by one, %+v (%v) batched", step, k, a, errA, b, errB)
						}
					}
				}
				if got, want := batched.Stats(), one.Stats(); got != want {
					t.Fatalf("stats: batch %+v, one by one %+v", got, want)
				}
				if maxTags == 8 && one.Stats().Evictions == 0 {
					t.Fatal("no eviction in a table of 8 tags: the test does not test eviction order")
				}
				if got, want := formatHits(batched.Drain(nil)), formatHits(one.Drain(nil)); got != want {
					t.Fatalf("batch table reports %q, want %q", got, want)
				}
			})
		}
	}
}

// BenchmarkSpendReport applies a report of 1,000 remote hits, each to a
// tag already tracked (the tags a busy peer also serves), the way the
// daemon applies a datagram: one hit at a time with Spend, or the whole
// report with SpendBatch. It reports remote hits applied per second.
func BenchmarkSpendReport(b *testing.B) {
	for _, n := range []int{10000, 1000000} {
		tb := newTestTable(b, Policy{Rate: 1, Burst: 1000000}, 2*n)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "203.0.113." + strconv.Itoa(i)
		}
		now := time.Unix(1e9, 0)
		for _, k := range keys {
			tb.Spend(now, k, 1)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		reports := make([][]Hit, 64)
		for i := range reports {
			reports[i] = make([]Hit, 1000)
			for j := range reports[i] {
				reports[i][j] = Hit{Key: keys[rng.IntN(n)], Count: 1}
			}
		}
		run := func(name string, apply func(now time.Time, hits []Hit)) {
			b.Run(fmt.Sprintf("%dtags/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					apply(now, reports[i%len(reports)])
					i++
				}
				b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "hits/s")
			})
		}
		run("one-by-one", func(now time.Time, hits []Hit) {
			for _, h := range hits {
				tb.Spend(now, h.Key, h.Count)
			}
		})
		run("batch", tb.SpendBatch)
	}
}

// TestSpendOverlongKey: a table takes MaxTagBytes up to MaxTagBytesLimit
// and no more; at the limit, a tag longer than it is served under its
// digest key, a key of the longest length any table keeps is spent from,
// and a longer key, which no table keeps, is ignored by Spend and
// SpendBatch alike.
func TestSpendOverlongKey(t *testing.T) {
	def := Policy{Rate: 1, Burst: 2}
	if _, err := New(Config{Default: def, MaxTags: 10, MaxTagBytes: MaxTagBytesLimit + 1}); err == nil {
		t.Fatalf("New took MaxTagBytes %d, over the limit", MaxTagBytesLimit+1)
	}
	tb, err := New(Config{Default: def, MaxTags: 10, MaxTagBytes: MaxTagBytesLimit})
	if err != nil {
		t.Fatal(err)
	}
	tag := []byte(strings.Repeat("t", 3*MaxTagBytesLimit))
	if !tb.Allow(at(0), tag) {
		t.Fatal("a long tag's first query refused")
	}
	if key := tb.Key(tag); len(key) != MaxTagBytesLimit+1 {
		t.Fatalf("the long tag's key is %d bytes, want %d", len(key), MaxTagBytesLimit+1)
	}
	tb.Spend(at(0), tb.Key(tag), 1)
	if tb.Allow(at(0), tag) {
		t.Fatal("a remote hit on the long tag's key was not spent")
	}
	over := strings.Repeat("k", 2*MaxTagBytesLimit)
	tb.Spend(at(0), over, 1)
	tb.SpendBatch(at(0), []Hit{{Key: over, Count: 1}, {Key: "short", Count: 2}})
	if st := tb.Stats(); st.Tags != 2 {
		t.Fatalf("%d tags tracked, want 2 (the long tag and \"short\")", st.Tags)
	}
	if _, err := tb.Peek(at(0), over); err != ErrUnknownTag {
		t.Fatalf("the overlong key is tracked (%v)", err)
	}
}
