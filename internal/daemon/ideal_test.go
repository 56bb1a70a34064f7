package daemon

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// This file owns the ideal the fake-time cluster tests compare a load
// with: what one leaky bucket (docs/design.md, Semantics) would have
// served of the very queries the load asked, at the instants it asked
// them.

// idealBucket is one tag's bucket of burst b and rate r, full at start,
// kept exactly: as the instant it is full again (the theoretical arrival
// time of GCRA) in rational nanoseconds, so no rounding ever turns a
// decision at the edge of a token. Its zero value is not usable; it is
// not safe for concurrent use.
type idealBucket struct {
	start     time.Time
	period    *big.Rat // nanoseconds a token takes to come back: 1e9/r
	tolerance *big.Rat // how far past now full may be while a token is left: (b-1) periods
	full      *big.Rat // nanoseconds after start when the bucket is full again
}

// newIdealBucket is a full bucket of burst b and rate r at start.
func newIdealBucket(start time.Time, b int, r float64) *idealBucket {
	if b < 1 || !(r > 0) || math.IsInf(r, 1) {
		panic("daemon: an ideal bucket needs burst >= 1 and a finite rate > 0")
	}
	period := new(big.Rat).Quo(big.NewRat(int64(time.Second), 1), new(big.Rat).SetFloat64(r))
	return &idealBucket{
		start:     start,
		period:    period,
		tolerance: new(big.Rat).Mul(big.NewRat(int64(b-1), 1), period),
		full:      new(big.Rat),
	}
}

// allow reports whether the bucket serves a query at now, and spends a
// token if it does. tokens = b - (full - now)/period, at most b, so a
// token is left when full - now <= (b-1) periods. A now before an earlier
// one refunds nothing: it only finds the bucket emptier.
func (b *idealBucket) allow(now time.Time) bool {
	t := new(big.Rat).SetInt64(int64(now.Sub(b.start)))
	ahead := new(big.Rat).Sub(b.full, t)
	if ahead.Cmp(b.tolerance) > 0 {
		return false
	}
	if ahead.Sign() < 0 {
		b.full.Set(t)
	}
	b.full.Add(b.full, b.period)
	return true
}

// versusIdeal is what a load was served against what one bucket would
// have served of the same queries (its ideal): over the whole run, and at
// the worst instants of it.
type versusIdeal struct {
	queries       int // asked
	served, ideal int // over the whole run
	// The lowest and highest served - ideal over the run's prefixes (from
	// the load's start to each query), and when, after the start. Both
	// start at 0, before the first query.
	low, high     int
	lowAt, highAt time.Duration
}

// over is how many more than its ideal the load was served over the
// whole run, 0 when it was served fewer.
func (v versusIdeal) over() int { return max(v.served-v.ideal, 0) }

// under is how many fewer than its ideal the load was served over the
// whole run, 0 when it was served more.
func (v versusIdeal) under() int { return max(v.ideal-v.served, 0) }

// compareIdeal replays every query of qs through one bucket of burst b
// and rate r, full at start, and counts what each served.
func compareIdeal(start time.Time, b int, r float64, qs []fakeQuery) versusIdeal {
	ib := newIdealBucket(start, b, r)
	v := versusIdeal{queries: len(qs)}
	for _, q := range qs {
		if ib.allow(q.at) {
			v.ideal++
		}
		if q.ok {
			v.served++
		}
		at := q.at.Sub(start)
		if d := v.served - v.ideal; d < v.low {
			v.low, v.lowAt = d, at
		} else if d > v.high {
			v.high, v.highAt = d, at
		}
	}
	return v
}

// TestIdealBucket holds the ideal bucket to the semantics it stands for,
// at the edges of its tokens.
func TestIdealBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration // after t0
		n    int           // queries at that instant
		want int           // how many the bucket serves of them
	}
	run := func(t *testing.T, b int, r float64, steps []step) {
		t.Helper()
		ib := newIdealBucket(t0, b, r)
		for i, s := range steps {
			got := 0
			for range s.n {
				if ib.allow(t0.Add(s.at)) {
					got++
				}
			}
			if got != s.want {
				t.Errorf("step %d: got %d served of %d at t0+%v, want %d", i, got, s.n, s.at, s.want)
			}
		}
	}
	t.Run("spec", func(t *testing.T) { // burst 10, rate 1, as the spec's A/B timeline
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

// TestCompareIdeal counts a load against its ideal, prefix by prefix.
func TestCompareIdeal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Burst 2, rate 1: the ideal serves at 0, 0, 1000, and refuses at 500.
	v := compareIdeal(t0, 2, 1, []fakeQuery{{at(0), 0, true}, {at(0), 1, false}, {at(500), 0, true}, {at(1000), 1, true}})
	want := versusIdeal{queries: 4, served: 3, ideal: 3, low: -1, lowAt: 0, high: 0}
	if v != want || v.over() != 0 || v.under() != 0 {
		t.Fatalf("%+v, want %+v", v, want)
	}
}
