package bucket

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// TestAllowBatchMatchesAllow asks two identical tables the same queries,
// one through Allow and one through AllowBatch in batches of every size:
// same answers, same reports, same counters. The queries repeat tags
// within a batch and mix empty tags, long (digested) tags, and tags of
// allow and deny policies.
func TestAllowBatchMatchesAllow(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("look-ahead=%v", ahead), func(t *testing.T) {
			forceLookAhead(t, ahead)
			testAllowBatchMatchesAllow(t)
		})
	}
}

// forceLookAhead makes AllowBatch look ahead, or not, whatever the size
// of the table, until the test ends.
func forceLookAhead(t *testing.T, on bool) {
	was, spendWas := lookAheadSlots, spendAheadSlots
	lookAheadSlots, spendAheadSlots = math.MaxInt64, math.MaxInt64
	if on {
		lookAheadSlots, spendAheadSlots = 0, 0
	}
	t.Cleanup(func() { lookAheadSlots, spendAheadSlots = was, spendWas })
}

func testAllowBatchMatchesAllow(t *testing.T) {
	cfg := func() *Table {
		return newTestTable(t, Policy{Rate: 1, Burst: 3}, 10000,
			Policy{Prefix: "ok:", Action: Allow}, Policy{Prefix: "no:", Action: Deny},
			Policy{Prefix: "api:", Rate: 2, Burst: 5})
	}
	one, batched := cfg(), cfg()
	rng := rand.New(rand.NewPCG(11, 12))
	long := strings.Repeat("L", 300)
	tag := func() []byte {
		switch rng.IntN(12) {
		case 0:
			return nil
		case 1:
			return []byte(fmt.Sprintf("ok:%d", rng.IntN(5)))
		case 2:
			return []byte(fmt.Sprintf("no:%d", rng.IntN(5)))
		case 3:
			return []byte(fmt.Sprintf("api:%s%d", long, rng.IntN(3)))
		case 4:
			return []byte(fmt.Sprintf("api:%d", rng.IntN(50)))
		}
		return []byte(fmt.Sprintf("t%d", rng.IntN(400)))
	}
	var tags [][]byte
	ok := make([]bool, 200)
	for step := 0; step < 300; step++ {
		now := at(float64(step) / 10)
		tags = tags[:0]
		for n := rng.IntN(len(ok)); len(tags) < n; {
			tags = append(tags, tag())
		}
		batched.AllowBatch(now, tags, ok[:len(tags)])
		for i, tg := range tags {
			if want := one.Allow(now, tg); ok[i] != want {
				t.Fatalf("step %d, query %d (%.10q): batch says %v, Allow %v", step, i, tg, ok[i], want)
			}
		}
		if step%7 == 0 {
			if got, want := formatHits(batched.Drain(nil)), formatHits(one.Drain(nil)); got != want {
				t.Fatalf("step %d: batch table reports %q, want %q", step, got, want)
			}
		}
	}
	// (Which full, idle entries the sweep has forgotten may differ: the
	// tables hash with different seeds. That is invisible to queries.)
	if got, want := fmt.Sprint(batched.PolicyStats()), fmt.Sprint(one.PolicyStats()); got != want {
		t.Fatalf("policy stats: batch %s, one by one %s", got, want)
	}
}

// TestAllowBatchConcurrent runs batches while other goroutines insert
// (growing indexes and arenas under the batches' look-ahead), forget and
// reload: under -race this checks the look-ahead reads nothing unsafely,
// and every tag is still served exactly burst times.
func TestAllowBatchConcurrent(t *testing.T) {
	forceLookAhead(t, true)
	const burst, tags, workers = 5, 1000, 4
	tb := newTestTable(t, Policy{Rate: 1, Burst: burst}, 100000)
	names := make([][]byte, tags)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("t%d", i))
	}
	var wg sync.WaitGroup
	served := make([][tags]int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([][]byte, 0, 100)
			idx := make([]int, 0, 100)
			ok := make([]bool, 100)
			for round := 0; round < burst*2; round++ {
				for i := w; i < tags+w; i++ {
					batch = append(batch, names[i%tags])
					idx = append(idx, i%tags)
					if len(batch) == cap(batch) || i == tags+w-1 {
						tb.AllowBatch(at(0), batch, ok[:len(batch)])
						for j, o := range ok[:len(batch)] {
							if o {
								served[w][idx[j]]++
							}
						}
						batch, idx = batch[:0], idx[:0]
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // churn other tags: inserts, growth, removals
		defer wg.Done()
		for i := 0; i < 5000; i++ {
			k := fmt.Sprintf("other%d", i)
			tb.Allow(at(0), []byte(k))
			if i%3 == 0 {
				tb.Forget(k)
			}
		}
	}()
	wg.Wait()
	for i := 0; i < tags; i++ {
		n := 0
		for w := range served {
			n += served[w][i]
		}
		if n != burst {
			t.Fatalf("t%d served %d times, want %d", i, n, burst)
		}
	}
}

// TestAllowBatchMatchesAllowEvicting is TestAllowBatchMatchesAllow on
// tables far smaller than the tags asked, one shard and several, hashing
// alike: every batch inserts, sweeps and evicts, which depends on the
// order of the queries within a shard. Long (digested) tags are mixed in.
func TestAllowBatchMatchesAllowEvicting(t *testing.T) {
	for _, maxTags := range []int{8, 5000} {
		t.Run(fmt.Sprintf("max-tags=%d", maxTags), func(t *testing.T) {
			one := newTestTable(t, Policy{Rate: 1, Burst: 3}, maxTags)
			batched := newTestTable(t, Policy{Rate: 1, Burst: 3}, maxTags)
			sameSeed(batched, one)
			rng := rand.New(rand.NewPCG(21, 22))
			long := strings.Repeat("L", 300)
			distinct := 3 * maxTags
			tag := func() []byte {
				if rng.IntN(20) == 0 {
					return []byte(fmt.Sprintf("%s%d", long, rng.IntN(distinct)))
				}
				return []byte(fmt.Sprintf("t%d", rng.IntN(distinct)))
			}
			ok := make([]bool, 150)
			for step := 0; step < 200; step++ {
				now := at(float64(step) / 50)
				tags := make([][]byte, rng.IntN(len(ok)))
				for i := range tags {
					tags[i] = tag()
				}
				if step%2 == 0 {
					// Some batches without a long tag, to take the
					// shard-by-shard path.
					for i := range tags {
						if len(tags[i]) > 256 {
							tags[i] = tags[i][len(tags[i])-6:]
						}
					}
				}
				batched.AllowBatch(now, tags, ok[:len(tags)])
				for i, tg := range tags {
					if want := one.Allow(now, tg); ok[i] != want {
						t.Fatalf("step %d, query %d (%.10q): batch says %v, Allow %v", step, i, tg, ok[i], want)
					}
				}
			}
			if got, want := batched.Stats(), one.Stats(); got != want || got.Evictions == 0 {
				t.Fatalf("stats: batch %+v, one by one %+v (want equal, with evictions)", got, want)
			}
			if got, want := formatHits(batched.Drain(nil)), formatHits(one.Drain(nil)); got != want {
				t.Fatalf("batch table reports %q, want %q", got, want)
			}
		})
	}
}

// sameSeed makes the empty table t hash as model does.
func sameSeed(t, model *Table) {
	t.seed = model.seed
	for i := range t.shards {
		t.shards[i].seed = model.seed
	}
}
