package bucket

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// t0 is an arbitrary instant the step tests count from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(sec float64) time.Time {
	return t0.Add(time.Duration(math.Round(sec * float64(time.Second))))
}

// specStep is one line of the worked example's A/B timeline (docs/protocol.md, The worked example): queries on one node,
// a report from one node to the other, or a look at both buckets.
type specStep struct {
	at     float64
	node   string // "A" or "B": queries go there, or it sends its report
	op     string // "query", "report", "deliver", "level"
	n      int    // queries sent
	served int    // of which the first served are OK and the rest NO
	hits   uint32 // report: the hit count it must carry for C
	levelA float64
	levelB float64
}

// TestSpecTimeline reproduces every decision of the worked example
// (docs/protocol.md): nodes A and B, burst 10, rate 1, reports every 5 s,
// client C behind a random load balancer. Bucket levels in its table are
// rounded; the decisions are exact.
func TestSpecTimeline(t *testing.T) {
	steps := []specStep{
		{at: 0, op: "level", levelA: 10, levelB: 10},
		{at: 0.1, node: "A", op: "query", n: 9, served: 9},
		{at: 0.1, node: "B", op: "query", n: 8, served: 8},
		{at: 0.1, op: "level", levelA: 1, levelB: 2},
		{at: 0.2, node: "A", op: "query", n: 2, served: 1},
		{at: 0.2, op: "level", levelA: 0, levelB: 2},
		{at: 5, node: "A", op: "report", hits: 10},
		{at: 5, node: "B", op: "report", hits: 8},
		{at: 5.1, op: "deliver"},
		{at: 5.1, op: "level", levelA: -3, levelB: -3},
		{at: 5.2, node: "A", op: "query", n: 1, served: 0},
		{at: 5.2, node: "B", op: "query", n: 1, served: 0},
		{at: 5.2, op: "level", levelA: -3, levelB: -3},
		{at: 6, op: "level", levelA: -2, levelB: -2},
		{at: 7, op: "level", levelA: -1, levelB: -1},
		{at: 8, op: "level", levelA: 0, levelB: 0},
		{at: 9, op: "level", levelA: 1, levelB: 1},
		// The bucket reaches one whole token 4 s after the reports were
		// applied at 5.1: refused at 9.0, served at 9.1, on either node.
		{at: 9, node: "A", op: "query", n: 1, served: 0},
		{at: 9.1, node: "B", op: "query", n: 1, served: 1},
		{at: 9.1, node: "A", op: "query", n: 1, served: 1},
		{at: 9.2, node: "A", op: "query", n: 1, served: 0},
		{at: 10, node: "B", op: "report", hits: 1},
		{at: 10, node: "A", op: "report", hits: 1},
		{at: 10.1, op: "deliver"},
		// Each node served one and learnt of the other's: 1 - 1 - 1 + 1 s
		// of refill, equal again on both.
		{at: 10.1, op: "level", levelA: 0, levelB: 0},
		{at: 10.2, node: "A", op: "query", n: 1, served: 0},
	}
	pol := Policy{Name: "spec", Rate: 1, Burst: 10}
	nodes := map[string]*Table{"A": newTestTable(t, pol, 100), "B": newTestTable(t, pol, 100)}
	other := map[string]string{"A": "B", "B": "A"}
	var inflight []func(now time.Time)
	for i, s := range steps {
		now := at(s.at)
		switch s.op {
		case "query":
			for q := 0; q < s.n; q++ {
				want := q < s.served
				if got := nodes[s.node].Allow(now, []byte("C")); got != want {
					t.Fatalf("step %d (t=%v %s query %d): got %v, want %v", i, s.at, s.node, q+1, got, want)
				}
			}
		case "report":
			hits := nodes[s.node].Drain(nil)
			if len(hits) != 1 || hits[0] != (Hit{Key: "C", Count: s.hits}) {
				t.Fatalf("step %d (t=%v %s report): got %v, want [{C %d}]", i, s.at, s.node, hits, s.hits)
			}
			to := nodes[other[s.node]]
			inflight = append(inflight, func(now time.Time) {
				for _, h := range hits {
					to.Spend(now, h.Key, h.Count)
				}
			})
		case "deliver":
			for _, f := range inflight {
				f(now)
			}
			inflight = nil
		case "level":
			for _, nl := range []struct {
				name string
				want float64
			}{{"A", s.levelA}, {"B", s.levelB}} {
				st, err := nodes[nl.name].Peek(now, "C")
				if err == ErrUnknownTag {
					st.Tokens = 10
				} else if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := math.Round(st.Tokens); got != nl.want && !(got == 0 && nl.want == 0) {
					t.Fatalf("step %d (t=%v): bucket on %s is %.3f, rounds to %v, want %v", i, s.at, nl.name, st.Tokens, got, nl.want)
				}
			}
		default:
			panic(fmt.Sprintf("step %d: unknown op %q", i, s.op))
		}
	}
}

func newTestTable(t testing.TB, def Policy, maxTags int, policies ...Policy) *Table {
	t.Helper()
	tb, err := New(Config{Default: def, Policies: policies, MaxTags: maxTags, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}
