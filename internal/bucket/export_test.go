package bucket

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"
)

// exported returns the levels Export gives at sec as "key=tokens,..."
// sorted by key.
func exported(t *testing.T, tb *Table, sec float64) string {
	t.Helper()
	var parts []string
	err := tb.Export(at(sec), func(ls []Level) error {
		for _, l := range ls {
			parts = append(parts, fmt.Sprintf("%s=%.6g", l.Key, l.Tokens))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func TestExportOnlyBucketsBelowBurst(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 4}, 100,
		Policy{Name: "login", Prefix: "login:", Rate: 0.5, Burst: 2}, Policy{Name: "ops", Prefix: "ops:", Action: Allow})
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "one", want: true},
		{at: 0, op: "allow", tag: "two", want: true},
		{at: 0, op: "allow", tag: "two", want: true},
		{at: 0, op: "spend", tag: "debt", hits: 7},
		{at: 0, op: "allow", tag: "login:bob", want: true},
		{at: 0, op: "allow", tag: "ops:x", want: true},
	})
	for i, c := range []struct {
		sec  float64
		want string
	}{
		{0, "debt=-3,login:bob=1,one=3,two=2"},
		{0.5, "debt=-2.5,login:bob=1.25,one=3.5,two=2.5"},
		{1, "debt=-2,login:bob=1.5,two=3"}, // one is full again
		{2, "debt=-1"},                     // login:bob and two full again
		{7, ""},
	} {
		if got := exported(t, tb, c.sec); got != c.want {
			t.Errorf("step %d (t=%v export): got %q, want %q", i, c.sec, got, c.want)
		}
	}
	// Exporting changed nothing: the unreported hits are all still there.
	runSteps(t, tb, []step{{at: 7, op: "drain", report: "login:bob=1,one=1,two=2"}})
}

func TestExportStopsAtError(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 4}, 1<<16)
	for i := range 5000 {
		tb.Allow(at(0), []byte(fmt.Sprint("t", i)))
	}
	if tb.Shards() < 2 {
		t.Fatalf("%d shards: the test needs several", tb.Shards())
	}
	calls := 0
	stop := fmt.Errorf("stop")
	if err := tb.Export(at(0), func([]Level) error { calls++; return stop }); err != stop {
		t.Fatalf("Export returned %v, want fn's error", err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times after its error, want 1", calls)
	}
	total := 0
	tb.Export(at(0), func(ls []Level) error { total += len(ls); return nil })
	if total != 5000 {
		t.Fatalf("exported %d tags, want 5000", total)
	}
}

// merge merges one level reported age seconds before sec.
func merge(tb *Table, sec, age float64, key string, tokens float64) int {
	return tb.Merge(at(sec), time.Duration(age*float64(time.Second)), []Level{{Key: []byte(key), Tokens: tokens}})
}

func TestMergeTakesTheLowerBucket(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 4}, 100,
		Policy{Name: "login", Prefix: "login:", Rate: 0.5, Burst: 2}, Policy{Name: "ops", Prefix: "ops:", Action: Deny})
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "spent", want: true},
		{at: 0, op: "allow", tag: "spent", want: true},
		{at: 0, op: "allow", tag: "spent", want: true},
	})
	for i, c := range []struct {
		sec, age float64
		key      string
		tokens   float64
		lowered  int
	}{
		{0, 0, "new", 1, 1}, // absent tag (a full bucket): takes the level
		{0, 0, "new", 3, 0}, // a fuller report refunds nothing
		{0, 0, "new", 1, 0}, // the same report twice is once
		// "spent" holds 3 unreported hits, which no level from elsewhere
		// holds: a level is compared with the bucket without them (full),
		// then they are spent on it again.
		{0, 0, "spent", 2, 1},     // 2 spent elsewhere, our 3 on top: -1
		{0, 0, "spent", 1, 1},     // 3 spent elsewhere: -2
		{0, 0, "spent", 1.5, 0},   // a fuller level than the last refunds nothing
		{0, 0, "aged", 0, 1},      // as of now
		{0, 3, "old", 0, 1},       // as of 3 s ago: refilled to 3
		{0, 5, "older", 0, 0},     // as of 5 s ago: full again
		{0, 0, "login:a", 3, 0},   // capped at the login burst of 2: full
		{0, 0, "login:b", 0.5, 1}, // under the login policy
		{0, 0, "ops:x", -10, 0},   // deny policy: no state
		{0, 0, "", -10, 0},        // empty key
		{0, 0, "nan", math.NaN(), 0},
		{0, 0, "abyss", math.Inf(-1), 1},
	} {
		if got := merge(tb, c.sec, c.age, c.key, c.tokens); got != c.lowered {
			t.Errorf("step %d (merge %q=%v aged %v): lowered %d, want %d", i, c.key, c.tokens, c.age, got, c.lowered)
		}
	}
	runSteps(t, tb, []step{
		{at: 0, op: "tokens", tag: "new", tokens: 1},
		{at: 0, op: "tokens", tag: "spent", tokens: -2},
		{at: 0, op: "tokens", tag: "old", tokens: 3},
		{at: 0, op: "tokens", tag: "login:b", tokens: 0.5},
		{at: 0, op: "allow", tag: "new", want: true},
		{at: 0, op: "allow", tag: "new", want: false},
		{at: 0, op: "allow", tag: "login:b", want: false},
		{at: 1, op: "allow", tag: "login:b", want: true},  // 0.5 + 0.5 tokens
		{at: 2.5, op: "allow", tag: "spent", want: false}, // -2 + 2.5 tokens
		{at: 3, op: "allow", tag: "spent", want: true},
		// Merging moved no unreported hit: only the local ones are drained.
		{at: 4, op: "drain", report: "login:b=1,new=1,spent=4"},
	})
	if _, err := tb.Peek(at(0), "older"); err != ErrUnknownTag {
		t.Errorf("a level full again by now was inserted: %v", err)
	}
}

func TestMergeReHomesUnderTheCurrentPolicy(t *testing.T) {
	// Export from a table under one set of policies, merge into one under
	// another: levels are tokens, capped at the new burst, as Reconfigure
	// keeps them.
	from := newTestTable(t, Policy{Rate: 1, Burst: 10}, 100)
	from.Spend(at(0), "api:x", 4)  // 6 tokens
	from.Spend(at(0), "web:y", 12) // -2 tokens
	to := newTestTable(t, Policy{Rate: 1, Burst: 10}, 100, Policy{Name: "api", Prefix: "api:", Rate: 2, Burst: 5})
	var n int
	from.Export(at(0), func(ls []Level) error { n += to.Merge(at(0), 0, ls); return nil })
	if n != 1 {
		t.Fatalf("lowered %d, want 1 (api:x at 6 tokens is full under a burst of 5)", n)
	}
	runSteps(t, to, []step{
		{at: 0, op: "tokens", tag: "web:y", tokens: -2},
		{at: 1, op: "tokens", tag: "web:y", tokens: -1},
	})
	if _, err := to.Peek(at(0), "api:x"); err != ErrUnknownTag {
		t.Errorf("api:x tracked though full under its new policy: %v", err)
	}
}

func TestMergeTimeNeverRunsBackwards(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 4}, 100)
	tb.Allow(at(10), []byte("x"))
	// A merge at an earlier instant is taken at the shard's clock (10 s):
	// 0 tokens then.
	if got := merge(tb, 5, 0, "y", 0); got != 1 {
		t.Fatalf("lowered %d, want 1", got)
	}
	runSteps(t, tb, []step{{at: 10, op: "tokens", tag: "y", tokens: 0}})
}

func TestExportMergeRoundTrip(t *testing.T) {
	from := newTestTable(t, Policy{Rate: 3, Burst: 7}, 1<<14)
	to := newTestTable(t, Policy{Rate: 3, Burst: 7}, 1<<14)
	for i := range 3000 {
		key := []byte(fmt.Sprint("k", i))
		for range i % 9 {
			from.Allow(at(0), key)
		}
	}
	want := exported(t, from, 0.1)
	from.Export(at(0.1), func(ls []Level) error { to.Merge(at(0.1), 0, ls); return nil })
	if got := exported(t, to, 0.1); got != want {
		t.Fatalf("round trip changed the levels:\n got %.200s\nwant %.200s", got, want)
	}
	// The decisions agree tag by tag from then on.
	for i := range 3000 {
		key := []byte(fmt.Sprint("k", i))
		if a, b := from.Allow(at(0.2), key), to.Allow(at(0.2), key); a != b {
			t.Fatalf("tag %s: exporter answers %v, merged table %v", key, a, b)
		}
	}
}

// BenchmarkExport is Export over a million tracked tags, every one below
// its burst, so that every tag is written out: the cost of a snapshot on
// the table's side. It reports the time per exported tag.
func BenchmarkExport(b *testing.B) {
	tb := newTestTable(b, Policy{Rate: 1, Burst: 10}, 2<<20)
	for i := range 1 << 20 {
		tb.Allow(at(0), []byte(fmt.Sprintf("203.0.%d.%d", i>>8, i&255)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := 0
		tb.Export(at(0), func(ls []Level) error { n += len(ls); return nil })
		if n != 1<<20 {
			b.Fatalf("exported %d", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N<<20), "ns/tag")
}

// BenchmarkMerge is Merge of a million levels into an empty table: every
// level is a new tag (the insert branch), as when a restarted daemon is
// warmed by a peer. It reports the time per merged tag.
func BenchmarkMerge(b *testing.B) {
	from := newTestTable(b, Policy{Rate: 1, Burst: 10}, 2<<20)
	for i := range 1 << 20 {
		from.Allow(at(0), []byte(fmt.Sprintf("203.0.%d.%d", i>>8, i&255)))
	}
	var levels []Level
	from.Export(at(0), func(ls []Level) error {
		for _, l := range ls {
			levels = append(levels, Level{Key: append([]byte(nil), l.Key...), Tokens: l.Tokens})
		}
		return nil
	})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		to := newTestTable(b, Policy{Rate: 1, Burst: 10}, 2<<20)
		b.StartTimer()
		if n := to.Merge(at(0), 0, levels); n != len(levels) {
			b.Fatalf("lowered %d of %d", n, len(levels))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N<<20), "ns/tag")
}

// reported returns the levels ReportedShard gives at sec as
// "key=tokens,..." sorted by key.
func reported(tb *Table, sec float64) string {
	var parts []string
	for i := range tb.Shards() {
		ls, _ := tb.ReportedShard(at(sec), i, nil, nil)
		for _, l := range ls {
			parts = append(parts, fmt.Sprintf("%s=%.6g", l.Key, l.Tokens))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// TestReportedShardLeavesOutUnreportedHits: a level for a peer is the
// bucket without the hits this table has yet to report; the state file's
// level (ExportShard) keeps them.
func TestReportedShardLeavesOutUnreportedHits(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, 100)
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "own", want: true}, // unreported: a peer knows nothing of it
		{at: 0, op: "allow", tag: "own", want: true},
		{at: 0, op: "allow", tag: "told", want: true},
		{at: 0, op: "allow", tag: "told", want: true},
		{at: 0, op: "allow", tag: "told", want: true},
		{at: 0, op: "drain", report: "own=2,told=3"},
		{at: 1, op: "allow", tag: "own", want: true},
		{at: 1, op: "allow", tag: "own", want: true},
		{at: 1, op: "spend", tag: "peer", hits: 4}, // a peer's hits: known
		{at: 1, op: "allow", tag: "peer", want: true},
		{at: 1, op: "allow", tag: "fresh", want: true},
	})
	if got, want := exported(t, tb, 1), "fresh=9,own=7,peer=5,told=8"; got != want {
		t.Errorf("ExportShard: %s, want %s", got, want)
	}
	// own: 2 reported at 0 (refilled by 1 since), 2 not; fresh: its only
	// hit unreported, full without it.
	if got, want := reported(tb, 1), "own=9,peer=6,told=8"; got != want {
		t.Errorf("ReportedShard: %s, want %s", got, want)
	}
	// Once drained, the two are the same.
	runSteps(t, tb, []step{{at: 1, op: "drain", report: "fresh=1,own=2,peer=1"}})
	if got, want := reported(tb, 1), exported(t, tb, 1); got != want {
		t.Errorf("after the report: ReportedShard %s, ExportShard %s", got, want)
	}
}

func TestPolicyRefill(t *testing.T) {
	for i, tc := range []struct {
		p    Policy
		want time.Duration
	}{
		{Policy{Rate: 1, Burst: 10}, 10 * time.Second},
		{Policy{Rate: 20, Burst: 10}, 500 * time.Millisecond},
		{Policy{Rate: 0.001, Burst: 1000000}, 1e9 * time.Second},
		{Policy{Rate: 1e-300, Burst: 10}, math.MaxInt64},
		{Policy{Rate: 1, Burst: 10, Action: Allow}, 0},
		{Policy{Action: Deny}, 0},
	} {
		if got := tc.p.Refill(); got != tc.want {
			t.Errorf("step %d: %+v.Refill() = %v, want %v", i, tc.p, got, tc.want)
		}
	}
}
