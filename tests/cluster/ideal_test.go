package cluster

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file owns the ideal the cluster tests compare a load with: what
// one leaky bucket (docs/design.md, Semantics) would have served of the
// very queries the load asked, at the instants it asked them.

func TestIdealBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration // after t0
		n    int           // queries at that instant
		want int           // how many the bucket serves of them
	}
	run := func(t *testing.T, b int, r float64, steps []step) {
		t.Helper()
		ib := harness.NewIdealBucket(t0, b, r)
		for i, s := range steps {
			got := 0
			for range s.n {
				if ib.Allow(t0.Add(s.at)) {
					got++
				}
			}
			if got != s.want {
				t.Errorf("step %d: got %d served of %d at t0+%v, want %d", i, got, s.n, s.at, s.want)
			}
		}
	}
	t.Run("spec", func(t *testing.T) { // burst 10, rate 1, as the worked example's A/B timeline
		run(t, 10, 1, []step{
			{0, 12, 10},                     // a full bucket serves its burst
			{999 * time.Millisecond, 1, 0},  // a token is not whole yet
			{time.Second, 2, 1},             // one token back after a second
			{3500 * time.Millisecond, 3, 2}, // two and a half back: two served
			{4 * time.Second, 1, 1},         // and the half left makes one at 4s
			{30 * time.Second, 11, 10},      // full again, never more than the burst
			{29 * time.Second, 1, 0},        // a clock gone back refunds nothing
			{31 * time.Second, 2, 1},        // and loses nothing either
		})
	})
	t.Run("third", func(t *testing.T) { // a period of 1/3 s, no whole number of nanoseconds, is exact
		var steps []step
		for i := range 301 {
			steps = append(steps, step{time.Duration(i) * time.Second, 4, 3})
		}
		run(t, 3, 3, append(steps,
			step{300*time.Second + time.Second/3, 1, 0},     // 333333333 ns: not yet
			step{300*time.Second + time.Second/3 + 1, 1, 1}, // 333333334 ns: a token
		))
	})
	t.Run("burst_one", func(t *testing.T) {
		run(t, 1, 20, []step{{0, 2, 1}, {49 * time.Millisecond, 1, 0}, {50 * time.Millisecond, 1, 1}, {time.Second, 5, 1}})
	})
}
