package admin

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// pol is a policy's counters as Snapshot carries them.
func pol(name string, ok, no uint64) bucket.PolicyStats {
	return bucket.PolicyStats{Policy: bucket.Policy{Name: name}, OK: ok, NO: no}
}

// Steps at fixed instants: the first sample is the baseline, each later
// one adds the interval since the previous; a clock stepping back takes a
// new baseline, a counter going down counts from zero.
func TestHistoryRecord(t *testing.T) {
	type want struct {
		secs  float64
		named []policyCount
		other policyCount
	}
	h := newHistory(4)
	steps := []struct {
		at   time.Duration
		pols []bucket.PolicyStats
		want []want // every interval held after the step, oldest first
	}{
		{0, []bucket.PolicyStats{pol("a", 10, 1), pol("b", 5, 0)}, nil},
		{5 * time.Second, []bucket.PolicyStats{pol("a", 20, 3), pol("b", 5, 0)},
			[]want{{5, []policyCount{{"a", 10, 2}}, policyCount{}}}},
		// b gets busier than a; a new policy c counts from zero.
		{10 * time.Second, []bucket.PolicyStats{pol("a", 21, 3), pol("b", 15, 5), pol("c", 1, 1)},
			[]want{{5, []policyCount{{"a", 10, 2}}, policyCount{}},
				{5, []policyCount{{"b", 10, 5}, {"c", 1, 1}, {"a", 1, 0}}, policyCount{}}}},
		// The clock steps back: a new baseline, nothing added.
		{8 * time.Second, []bucket.PolicyStats{pol("a", 30, 3), pol("b", 15, 5)},
			[]want{{5, []policyCount{{"a", 10, 2}}, policyCount{}},
				{5, []policyCount{{"b", 10, 5}, {"c", 1, 1}, {"a", 1, 0}}, policyCount{}}}},
		// a's counters went down (started again): its current count is the delta.
		{18 * time.Second, []bucket.PolicyStats{pol("a", 2, 1), pol("b", 15, 5)},
			[]want{{5, []policyCount{{"a", 10, 2}}, policyCount{}},
				{5, []policyCount{{"b", 10, 5}, {"c", 1, 1}, {"a", 1, 0}}, policyCount{}},
				{10, []policyCount{{"a", 2, 1}}, policyCount{}}}},
	}
	for i, st := range steps {
		h.record(t0.Add(st.at), st.pols)
		got := h.intervals()
		if len(got) != len(st.want) {
			t.Fatalf("step %d: %d intervals, want %d", i, len(got), len(st.want))
		}
		for k, w := range st.want {
			g := got[k]
			var named []policyCount
			for _, c := range g.Named {
				if c.Name != "" {
					named = append(named, c)
				}
			}
			if g.Seconds != w.secs || !slices.Equal(named, w.named) || g.Other != w.other {
				t.Errorf("step %d: interval %d = %v s %v other %v, want %v s %v other %v",
					i, k, g.Seconds, named, g.Other, w.secs, w.named, w.other)
			}
		}
	}
}

// The ring keeps its length, and each interval at most historyNamed
// policies by name, whatever the number of policies: the rest are summed.
func TestHistoryBounds(t *testing.T) {
	const length, policies = 5, 1000
	h := newHistory(length)
	counts := make([]bucket.PolicyStats, policies)
	for step := range 3 * length {
		for i := range counts {
			counts[i] = pol(fmt.Sprintf("p%04d", i), uint64(step*(i+1)), uint64(step))
		}
		h.record(t0.Add(time.Duration(step)*historyStep), counts)
	}
	ivs := h.intervals()
	if len(ivs) != length || cap(h.ring) != length {
		t.Fatalf("%d intervals, ring of %d; want %d", len(ivs), cap(h.ring), length)
	}
	for k, iv := range ivs {
		if want := t0.Add(time.Duration(2*length+k) * historyStep); !iv.End.Equal(want) {
			t.Errorf("interval %d ends %v, want %v (the newest kept, oldest first)", k, iv.End, want)
		}
		var ok, no uint64
		for j, c := range iv.Named {
			// The busiest are the highest-numbered policies.
			if want := fmt.Sprintf("p%04d", policies-1-j); c.Name != want {
				t.Errorf("interval %d: named[%d] = %q, want %q", k, j, c.Name, want)
			}
			ok, no = ok+c.OK, no+c.NO
		}
		ok, no = ok+iv.Other.OK, no+iv.Other.NO
		if wantOK := uint64(policies * (policies + 1) / 2); ok != wantOK || no != policies {
			t.Errorf("interval %d: %d OK %d NO in all, want %d and %d", k, ok, no, wantOK, policies)
		}
	}
	s := chartSeries(ivs)
	if len(s.Names) != historyNamed || !s.Other || len(s.Decisions) != historyNamed+1 || len(s.Refusals) != historyNamed+1 {
		t.Fatalf("chart: %d names (other %v), %d and %d lines; want %d + other", len(s.Names), s.Other,
			len(s.Decisions), len(s.Refusals), historyNamed)
	}
	// Every line's point is a rate; together they are every query.
	var sum float64
	for j := range s.Decisions {
		sum += s.Decisions[j][0]
	}
	if want := float64(policies*(policies+1)/2+policies) / historyStep.Seconds(); math.Abs(sum-want) > 1e-6 {
		t.Errorf("decisions in the first interval: %v/s in all, want %v", sum, want)
	}
}

// The chart's policies are the busiest over the window; one among an
// interval's busiest but not charted moves to that interval's "other".
func TestChartSeries(t *testing.T) {
	var ivs []interval
	for i := range historyNamed + 2 {
		iv := interval{End: t0.Add(time.Duration(i) * time.Second), Seconds: 2}
		iv.Named[0] = policyCount{Name: fmt.Sprintf("p%d", i), OK: uint64(10 * (i + 1)), NO: 2}
		ivs = append(ivs, iv)
	}
	s := chartSeries(ivs)
	if len(s.Names) != historyNamed || s.Names[0] != fmt.Sprintf("p%d", historyNamed+1) || !s.Other {
		t.Fatalf("names %q other %v", s.Names, s.Other)
	}
	other := len(s.Names)
	// p0 and p1, the quietest, are drawn in "other".
	if s.Decisions[other][0] != 6 || s.Refusals[other][0] != 1 || s.Decisions[other][1] != 11 || s.Decisions[other][2] != 0 {
		t.Errorf("other: decisions %v refusals %v", s.Decisions[other], s.Refusals[other])
	}
	if s.Decisions[0][historyNamed+1] != float64(10*(historyNamed+2)+2)/2 || s.Decisions[0][0] != 0 {
		t.Errorf("busiest: %v", s.Decisions[0])
	}

	// Fewer policies than lines: no "other" line.
	s = chartSeries(ivs[:2])
	if len(s.Names) != 2 || s.Other || len(s.Decisions) != 2 {
		t.Errorf("two policies: names %q other %v lines %d", s.Names, s.Other, len(s.Decisions))
	}
	if s = chartSeries(nil); len(s.Names) != 0 || s.Other || len(s.Decisions) != 0 {
		t.Errorf("no history: %+v", s)
	}
}

// TestHistorySampler: the sampler, on fake time, samples every step, the
// first one step after it starts; stopping it waits no longer than its
// grace, exactly, for a sample stuck in Sources.Snapshot. A real server
// samples from New to Close.
func TestHistorySampler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHistory(historyLen)
		const stuckAt = 10
		var calls atomic.Int64
		var first time.Duration
		stuck, release := make(chan struct{}), make(chan struct{})
		start := time.Now()
		h.start(historyStep, func() Snapshot {
			n := calls.Add(1)
			if n == 1 {
				first = time.Since(start)
			}
			if n == stuckAt {
				close(stuck)
				<-release
			}
			return Snapshot{Policies: []bucket.PolicyStats{pol("default", uint64(n), 0)}}
		}, func() time.Time { return t0.Add(time.Duration(calls.Load()) * time.Second) })
		<-stuck
		if took := time.Since(start); first != historyStep || took != stuckAt*historyStep {
			t.Errorf("first sample after %v, sample %d after %v; want one step (%v), %d steps", first, stuckAt, took, historyStep, stuckAt)
		}
		const grace = 10 * time.Millisecond
		stopping := time.Now()
		h.stop(grace) // the sampler is stuck: stop returns anyway
		if took := time.Since(stopping); took != grace {
			t.Errorf("stop returned after %v, want its grace (%v)", took, grace)
		}
		synctest.Wait()
		select {
		case <-h.done:
			t.Fatal("the sampler returned while its snapshot is stuck")
		default:
		}
		close(release)
		<-h.done
		h.stop(time.Second) // twice is fine
		if n := len(h.intervals()); n != stuckAt-1 {
			t.Errorf("%d intervals after %d samples, want %d", n, stuckAt, stuckAt-1)
		}
	})

	// Through a real server.
	s, err := New(Config{Addr: "127.0.0.1:0"}, newFake().sources())
	if err != nil {
		t.Fatal(err)
	}
	if s.hist.done == nil {
		t.Fatal("New did not start the sampler")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.hist.done:
	default:
		t.Fatal("the sampler still runs after Close")
	}
}
