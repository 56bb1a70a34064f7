package peer

import (
	"slices"
	"time"
)

// This file owns the bookkeeping of a sender's sequence: the bitmap of
// the numbers seen below the highest, and the numbers missing from it
// that the node asks the sender for again (package gossip's repair.go).

// bitmap is ReplayWindow bits; bit i stands for highest-i.
type bitmap [ReplayWindow / 64]uint64

func (b *bitmap) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b *bitmap) has(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b *bitmap) set(i uint64)      { b[i/64] |= 1 << (i % 64) }

// shift moves every bit n places up (older), dropping those past the end.
func (b *bitmap) shift(n uint64) {
	if n >= ReplayWindow {
		*b = bitmap{}
		return
	}
	words, off := int(n/64), n%64
	for i := len(b) - 1; i >= 0; i-- {
		var w uint64
		if j := i - words; j >= 0 {
			w = b[j] << off
			if off > 0 && j > 0 {
				w |= b[j-1] >> (64 - off)
			}
		}
		b[i] = w
	}
}

// MaxHoles bounds the missing numbers a peer keeps asking for; a loss of
// more datagrams at once is repaired as far as its first MaxHoles.
const MaxHoles = 256

// MaxAsks is how many times a missing number is asked for before it is
// given up as lost.
const MaxAsks = 12

// RepairWithin is how long after it was sent a datagram may still arrive
// repaired, for a sender reporting every interval: noticed by the next
// datagram, asked for one interval later, then once an interval MaxAsks
// times.
func RepairWithin(interval time.Duration) time.Duration {
	return (MaxAsks + 2) * interval
}

// hole is a missing number: when it was noticed, and how often asked for.
type hole struct {
	noticed time.Time
	asks    uint8
}

// holes are the numbers missing from a sender's sequence, within the
// window; nil until the first loss.
type holes map[uint64]*hole

// notice records the numbers from..to-1 as missing, noticed at at.
func (h *holes) notice(from, to uint64, at time.Time) {
	if to-from > MaxHoles {
		from = to - MaxHoles // the latest: the earliest fall out first
	}
	if *h == nil {
		*h = holes{}
	}
	for s := from; s < to && len(*h) < MaxHoles; s++ {
		(*h)[s] = &hole{noticed: at}
	}
}

// filled forgets seq, which arrived, and reports whether it was asked for.
func (h holes) filled(seq uint64) bool {
	x, ok := h[seq]
	if ok {
		delete(h, seq)
	}
	return ok && x.asks > 0
}

// ForgetHoles gives up every number missing so far: those of a split
// (Split), which loss repair leaves to the partition policy.
func (p *Peer) ForgetHoles() { clear(p.holes) }

// Split reports whether a sender heard at at, after last, was silent long
// enough for its gap to be a split's rather than a loss: twice the silence
// timeout silent. Shorter, it is a run of lost datagrams (at 20% random
// loss six intervals in a row are lost once in 15,000), which repair fills
// in.
func Split(last, at time.Time, silent time.Duration) bool {
	return !last.IsZero() && at.Sub(last) > 2*silent
}

// Holes appends to dst, in ascending order, the numbers missing from the
// sender's sequence that are due to be asked for again at now: noticed at
// least hold ago, asked for fewer than MaxAsks times, at most max of them;
// it counts each as asked once more. Numbers that fell out of the window,
// or were asked for MaxAsks times, are forgotten: lost for good, as
// Info.Lost still counts them.
func (p *Peer) Holes(dst []uint64, now time.Time, hold time.Duration, max int) []uint64 {
	start := len(dst)
	for seq, x := range p.holes {
		switch {
		case p.highest-seq >= ReplayWindow || x.asks >= MaxAsks:
			delete(p.holes, seq)
		case now.Sub(x.noticed) >= hold && len(dst)-start < max:
			x.asks++
			dst = append(dst, seq)
		}
	}
	slices.Sort(dst[start:])
	return dst
}
