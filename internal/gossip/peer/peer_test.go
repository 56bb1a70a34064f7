package peer

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPeerSequence(t *testing.T) {
	type step struct {
		seq              uint64
		fresh            bool
		lost, duplicates uint64
	}
	steps := []step{
		{seq: 5, fresh: true}, // first heard: nothing before it is lost
		{seq: 6, fresh: true},
		{seq: 6, fresh: false, duplicates: 1}, // duplicate
		{seq: 9, fresh: true, lost: 2, duplicates: 1},
		{seq: 8, fresh: true, lost: 1, duplicates: 1}, // late, not lost after all
		{seq: 8, fresh: false, lost: 1, duplicates: 2},
		{seq: 200, fresh: true, lost: 191, duplicates: 2},
		{seq: 100, fresh: true, lost: 190, duplicates: 2}, // within the window: late
		{seq: 2000, fresh: true, lost: 1989, duplicates: 2},
		{seq: 900, fresh: false, lost: 1989, duplicates: 3}, // beyond the window: a replay
		{seq: 1999, fresh: true, lost: 1988, duplicates: 3},
	}
	var p Peer
	for i, s := range steps {
		fresh := p.Accept(s.seq, t0)
		if fresh {
			p.Info.Packets++
		}
		if fresh != s.fresh || p.Info.Lost != s.lost || p.Info.Duplicates != s.duplicates {
			t.Fatalf("step %d (seq %d): got fresh %v lost %d dup %d, want %v %d %d",
				i, s.seq, fresh, p.Info.Lost, p.Info.Duplicates, s.fresh, s.lost, s.duplicates)
		}
	}
}

// The numbers missing are asked for once held long enough, each at most
// MaxAsks times; one arriving after it was asked for counts as repaired.
func TestPeerHoles(t *testing.T) {
	var p Peer
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	p.Accept(1, at(0))
	p.Info.Packets++
	p.Accept(5, at(0))   // 2, 3, 4 missing
	p.Accept(3, at(0.5)) // late, never asked for
	if got := p.Holes(nil, at(0.9), time.Second, 10); len(got) != 0 {
		t.Fatalf("asked %v before the hold", got)
	}
	if got := p.Holes(nil, at(1), time.Second, 10); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("asked %v, want [2 4]", got)
	}
	p.Accept(4, at(1.2)) // the answer
	if p.Info.Repaired != 1 || p.Info.Lost != 1 {
		t.Fatalf("repaired %d lost %d, want 1 and 1", p.Info.Repaired, p.Info.Lost)
	}
	for i := 2; i <= MaxAsks; i++ {
		if got := p.Holes(nil, at(float64(i)), time.Second, 10); !slices.Equal(got, []uint64{2}) {
			t.Fatalf("ask %d: %v, want [2]", i, got)
		}
	}
	if got := p.Holes(nil, at(100), time.Second, 10); len(got) != 0 {
		t.Fatalf("asked %v after %d asks", got, MaxAsks)
	}
	p.Accept(2, at(101)) // too late to count as repaired: given up
	if p.Info.Repaired != 1 || p.Info.Lost != 0 {
		t.Fatalf("repaired %d lost %d, want 1 and 0", p.Info.Repaired, p.Info.Lost)
	}
	// A loss of more than MaxHoles at once keeps the latest MaxHoles.
	p.Accept(5000, at(102))
	got := p.Holes(nil, at(200), time.Second, 1000)
	if len(got) != MaxHoles || got[0] != 5000-MaxHoles || got[len(got)-1] != 4999 {
		t.Fatalf("%d holes from %d to %d, want %d from %d", len(got), got[0], got[len(got)-1], MaxHoles, 5000-MaxHoles)
	}
	// At most max a time.
	if got := p.Holes(nil, at(300), time.Second, 3); len(got) != 3 {
		t.Fatalf("%d holes asked, want 3", len(got))
	}
}

func TestBitmapShift(t *testing.T) {
	var b bitmap
	b.set(0)
	b.set(63)
	b.shift(1)
	if !b.has(1) || !b.has(64) || b.has(0) || b.has(63) {
		t.Fatalf("shift 1: %x", b)
	}
	b.shift(130)
	if !b.has(131) || !b.has(194) || b.has(1) {
		t.Fatalf("shift 130: %x", b)
	}
	b.shift(ReplayWindow - 194)
	if !b.has(ReplayWindow-194+131) || b.has(ReplayWindow-1+1-1) && false {
		t.Fatalf("shift to the end: %x", b)
	}
	b.shift(1)
	if b.empty() {
		t.Fatal("all gone too soon")
	}
	b.shift(ReplayWindow)
	if !b.empty() {
		t.Fatal("a whole window's shift left bits")
	}
}
