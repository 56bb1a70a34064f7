package peer

import "testing"

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
		{seq: 100, fresh: false, lost: 191, duplicates: 3}, // beyond the window: a replay
		{seq: 199, fresh: true, lost: 190, duplicates: 3},
	}
	var p Peer
	for i, s := range steps {
		fresh := p.Accept(s.seq)
		if fresh {
			p.Info.Packets++
		}
		if fresh != s.fresh || p.Info.Lost != s.lost || p.Info.Duplicates != s.duplicates {
			t.Fatalf("step %d (seq %d): got fresh %v lost %d dup %d, want %v %d %d",
				i, s.seq, fresh, p.Info.Lost, p.Info.Duplicates, s.fresh, s.lost, s.duplicates)
		}
	}
}
