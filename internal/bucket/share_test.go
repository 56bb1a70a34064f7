package bucket

import (
	"math"
	"testing"
)

func TestScale(t *testing.T) {
	for i, c := range []struct {
		share     float64
		burst     int
		wantRate  float64
		wantBurst int
		bad       bool
	}{
		{0, 5, 2, 5, false},
		{1, 5, 2, 5, false},
		{0.5, 5, 1, 3, false},
		{0.5, 4, 1, 2, false},
		{0.25, 1, 0.5, 1, false},
		{0.75, 10, 1.5, 8, false},
		{1.5, 5, 0, 0, true},
		{-0.5, 5, 0, 0, true},
		{math.NaN(), 5, 0, 0, true},
	} {
		p, err := scale(Policy{Name: "p", Rate: 2, Burst: c.burst, Share: c.share})
		if c.bad {
			if err == nil {
				t.Errorf("step %d: share %v accepted", i, c.share)
			}
			continue
		}
		if err != nil || p.Rate != c.wantRate || p.Burst != c.wantBurst {
			t.Errorf("step %d: share %v of 2/s burst %d: got %v/s burst %d (%v), want %v/s burst %d",
				i, c.share, c.burst, p.Rate, p.Burst, err, c.wantRate, c.wantBurst)
		}
	}
}

// TestShareHoldsScaledRate: a table at half its share serves half the
// burst (rounded up) and refills at half the rate, in the daemon and in
// the processes deciding from the shared table, while its fingerprint
// stays the whole policy's; given the whole share back, a bucket keeps
// its tokens and refills at the whole rate.
func TestShareHoldsScaledRate(t *testing.T) {
	whole := Policy{Rate: 2, Burst: 5}
	half := whole
	half.Share = 0.5
	ref, err := New(Config{Default: whole, MaxTags: 100, MaxTagBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	tb, v := sharedTable(t, half)
	if tb.Fingerprint() != ref.Fingerprint() {
		t.Errorf("fingerprint %016x at half share, %016x whole: want equal", tb.Fingerprint(), ref.Fingerprint())
	}
	if p := tb.Policies()[0]; p.Rate != 1 || p.Burst != 3 {
		t.Errorf("Policies: %+v, want 1/s burst 3", p)
	}
	served := 0
	for range 10 {
		if tb.Allow(at(0), []byte("a")) {
			served++
		}
	}
	if served != 3 {
		t.Errorf("t0: served %d, want 3 (half of burst 5, rounded up)", served)
	}
	// The shared table decides at the scaled rate too: one token a second.
	if d := v.Decide(ns(0.9), []byte("a")); d.Code != No {
		t.Errorf("in process at 0.9 s: %v, want No", d.Code)
	}
	if d := v.Decide(ns(1), []byte("a")); d.Code != OK || d.Limit != 3 {
		t.Errorf("in process at 1 s: %+v, want OK of limit 3", d)
	}
	if p, ok := v.Policy(0); !ok || p.Rate != 1 || p.Burst != 3 {
		t.Errorf("shared policy: %+v %v, want 1/s burst 3", p, ok)
	}
	// Whole again at 1 s: no token left, then 2 a second.
	if err := tb.Reconfigure(at(1), Config{Default: whole, MaxTags: 1000, MaxTagBytes: 64, Shared: true}); err != nil {
		t.Fatal(err)
	}
	if tb.Allow(at(1.4), []byte("a")) {
		t.Error("whole again at 1.4 s: served, want the bucket still empty")
	}
	if !tb.Allow(at(1.5), []byte("a")) {
		t.Error("whole again at 1.5 s: refused, want one token at 2/s")
	}
	if tb.Fingerprint() != ref.Fingerprint() {
		t.Error("fingerprint changed with the share")
	}
}
