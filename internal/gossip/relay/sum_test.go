package relay

import (
	"reflect"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

func TestHoldFor(t *testing.T) {
	for _, tc := range []struct {
		fraction float64
		burst    int
		rate     float64
		interval time.Duration
		theta    uint32
		age      time.Duration
	}{
		{0.5, 20, 10, time.Second, 10, 2 * time.Second},
		{0.5, 21, 10, time.Second, 11, 3 * time.Second}, // 10.5 up, 2.1 s up to whole intervals
		{0.01, 3, 0.4, time.Second, 1, 8 * time.Second},
		{1, 5, 100, time.Second, 5, time.Second}, // 50 ms, at least one interval
		{0.25, 100, 1, 5 * time.Second, 25, 100 * time.Second},
		{0.5, 10, 0.001, time.Second, 5, MaxHoldAge}, // 10,000 s: held an hour at most
	} {
		refill := bucket.Policy{Rate: tc.rate, Burst: tc.burst}.Refill()
		theta, age := HoldFor(tc.fraction, tc.burst, refill, tc.interval)
		if theta != tc.theta || age != tc.age {
			t.Errorf("HoldFor(%v, %d, %v, %v) = %d, %v; want %d, %v", tc.fraction, tc.burst, tc.rate, tc.interval, theta, age, tc.theta, tc.age)
		}
	}
}

// relayStep is one aggregate of a Sum: hits added at t, then what a
// Flush at t passes on.
type relayStep struct {
	t    time.Duration
	add  []Hit
	want []Hit
}

func runSum(t *testing.T, r *Sum, steps []relayStep) {
	t.Helper()
	t0 := time.Unix(1_800_000_000, 0)
	for i, st := range steps {
		now := t0.Add(st.t)
		r.Add(now, st.add)
		got := r.Flush(now, nil)
		if len(got) == 0 {
			got = nil
		}
		if !reflect.DeepEqual(got, st.want) {
			t.Fatalf("step %d (t=%v): got %v, want %v", i, st.t, got, st.want)
		}
	}
}

func TestSum(t *testing.T) {
	s := time.Second
	hold := func(string) (uint32, time.Duration) { return 10, 2 * s }
	r := NewSum(hold, 2, s)
	runSum(t, r, []relayStep{
		// Under the threshold: held.
		{0, []Hit{{Key: "a", Count: 4}, {Key: "b", Count: 1}}, nil},
		// a reaches 10: passed on, and hot for 2 ages (4 s).
		{1 * s, []Hit{{Key: "a", Count: 6}}, []Hit{{Key: "a", Count: 10}}},
		// b has stayed under 10 for 2 s: dropped. a is hot: passed on
		// however few; 3 is under the 5 a second that keeps it hot.
		{2 * s, []Hit{{Key: "a", Count: 3}}, []Hit{{Key: "a", Count: 3}}},
		{3 * s, []Hit{{Key: "a", Count: 5}, {Key: "c", Count: 12}}, []Hit{{Key: "a", Count: 5}, {Key: "c", Count: 12}}}, // 5 renews a until 7 s
		{6 * s, []Hit{{Key: "a", Count: 1}}, []Hit{{Key: "a", Count: 1}}},
		// a is no longer hot at 7 s: held again.
		{7 * s, []Hit{{Key: "a", Count: 1}}, nil},
		{8 * s, []Hit{{Key: "a", Count: 9}}, []Hit{{Key: "a", Count: 10}}},
	})
	st := r.Stats()
	want := Stats{HeldTags: 0, HotTags: 1, Added: 42, Passed: 41, Dropped: 1, DroppedTags: 1} // c cooled at 7 s
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// TestSumHoldsNothing: a threshold of 1 passes every sum on at the
// next aggregate, in key order; empty keys and counts are ignored.
func TestSumHoldsNothing(t *testing.T) {
	r := NewSum(func(string) (uint32, time.Duration) { return 1, time.Second }, 1, time.Second)
	runSum(t, r, []relayStep{
		{0, []Hit{{Key: "z", Count: 1}, {Key: "a", Count: 2}, {Key: "", Count: 5}, {Key: "q", Count: 0}, {Key: "z", Count: 3}}, []Hit{{Key: "a", Count: 2}, {Key: "z", Count: 4}}},
		{time.Second, nil, nil},
	})
	if st := r.Stats(); st.HeldHits != 0 || st.Added != 6 || st.Passed != 6 {
		t.Errorf("stats %+v", st)
	}
}

// TestSumPerTag: each tag has its own threshold and age.
func TestSumPerTag(t *testing.T) {
	hold := func(key string) (uint32, time.Duration) {
		if key[0] == 'l' { // "login:" tags: burst 4
			return 2, 4 * time.Second
		}
		return 10, 2 * time.Second
	}
	r := NewSum(hold, 1, time.Second)
	runSum(t, r, []relayStep{
		{0, []Hit{{Key: "login:x", Count: 2}, {Key: "ip", Count: 2}}, []Hit{{Key: "login:x", Count: 2}}},
		{2 * time.Second, nil, nil}, // ip dropped at its age
	})
	if st := r.Stats(); st.Dropped != 2 || st.Passed != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestOwnHits: a node's own hits come off the aggregates that carry them,
// once; what never comes back is forgotten.
func TestOwnHits(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	o := NewOwnHits(3 * time.Second)
	o.Sent(t0, []Hit{{Key: "a", Count: 3}, {Key: "b", Count: 2}, {Key: "", Count: 1}, {Key: "c", Count: 0}})
	o.Sent(t0.Add(time.Second), []Hit{{Key: "a", Count: 1}})
	if o.Len() != 2 {
		t.Fatalf("%d tags in the ledger, want 2", o.Len())
	}
	steps := []struct {
		agg, want []Hit
	}{
		{[]Hit{{Key: "a", Count: 10}, {Key: "x", Count: 1}}, []Hit{{Key: "a", Count: 6}, {Key: "x", Count: 1}}}, // a's 4 come off
		{[]Hit{{Key: "a", Count: 2}}, []Hit{{Key: "a", Count: 2}}},                                              // and only once
		{[]Hit{{Key: "b", Count: 1}}, nil},                                                                      // an aggregate short of our own
		{[]Hit{{Key: "b", Count: 5}}, []Hit{{Key: "b", Count: 4}}},                                              // the last one comes off
	}
	for i, st := range steps {
		got := o.Others(st.agg, nil)
		if !reflect.DeepEqual(got, st.want) {
			t.Fatalf("step %d: got %v, want %v", i, got, st.want)
		}
	}
	o.Sent(t0.Add(2*time.Second), []Hit{{Key: "d", Count: 7}})
	if n := o.Forget(t0.Add(5 * time.Second)); n != 0 {
		t.Errorf("forgot %d hits at 3 s after sending, want none", n)
	}
	if n := o.Forget(t0.Add(5*time.Second + 1)); n != 7 || o.Len() != 0 {
		t.Errorf("forgot %d hits, %d tags left; want 7, 0", n, o.Len())
	}
}

// TestPickRelay: the same key always goes to the same relay, and keys
// spread over the relays.
func TestPick(t *testing.T) {
	counts := make([]int, 3)
	for i := range 3000 {
		key := "tag" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		k := Pick(key, 3)
		if k != Pick(key, 3) || k < 0 || k >= 3 {
			t.Fatalf("Pick(%q, 3) = %d", key, k)
		}
		counts[k]++
	}
	for k, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("relay %d got %d of 3000 keys", k, n)
		}
	}
	if Pick("anything", 1) != 0 {
		t.Error("one relay: not 0")
	}
}
