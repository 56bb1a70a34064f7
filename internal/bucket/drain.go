package bucket

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// This file owns the shard's side of a report (Table.Drain): taking back
// from the state file the hits and refusals counted in the records, its
// own and those of processes deciding from the shared table, through the
// dirty bitmap. Every key taken back is checked against the index
// (trust.go) before it is reported or counted.

// drainAhead is how many records a drain has read and asked the index
// slots of before it checks the first against the index: the slots' cache
// misses then overlap rather than follow one another (the records are
// read in the order of the area, which the memory fetches ahead itself).
const drainAhead = 16

// taken is a record a drain took counts from, whose key waits to be
// checked against the index.
type taken struct {
	ref    uint32
	u, rf  uint32 // unreported hits, refusals
	off, n int    // the key's bytes in the drain's keys
	h      uint64 // their hash
}

// drain appends the shard's records with unreported hits to dst, their
// keys' lengths to lens and their keys to keys, found through the dirty
// bitmap over the shard's chunks, and hands the refusals counted in
// process to the sketches. A dirty bit that names no live record is
// ignored, and so is a record whose key is not the one the index holds
// it under (ownKey: a caller overwrote it; its refusals count as
// untracked); a record's hits are capped at what its tag's policy could
// have served since the last drain (plus what was charged to it). So
// whatever is written into the state file, a drain takes at most one
// hit per tracked tag, keyed by a key the shard inserted, and reaches
// the peers as no more debt than the policies allow: as much as the
// daemon's own worst case, every tag hit within one interval.
func (s *shard) drain(now int64, dst []Hit, lens []int, keys []byte) ([]Hit, []int, []byte) {
	reg := s.arena.reg
	if s.lastDrain == 0 {
		s.lastDrain = s.born
	}
	elapsed := max(now-s.lastDrain, 0)
	s.lastDrain = now
	var batch [drainAhead]taken
	nb := 0
	for ci := range s.arena.chunks {
		c := &s.arena.chunks[ci]
		w0 := c.ref >> 6
		for w := range c.live {
			d := &reg.dirty[w0+uint32(w)]
			if atomic.LoadUint64(d) == 0 {
				continue
			}
			set := atomic.SwapUint64(d, 0) & c.live[w]
			for set != 0 {
				ref := c.ref + uint32(w*64+bits.TrailingZeros64(set))
				set &= set - 1
				r := s.arena.rec(ref)
				u, rf := r.takeUnreported(), r.takeRefused()
				if u == 0 && rf == 0 {
					continue
				}
				off := len(keys)
				var h uint64
				var fits bool
				if keys, h, fits = s.copyKey(keys, ref, c.size); !fits {
					s.untracked += uint64(rf)
					continue
				}
				slots := s.index.slots
				prefetch(unsafe.Pointer(&slots[home(uint32(h), len(slots))]))
				batch[nb] = taken{ref: ref, u: u, rf: rf, off: off, n: len(keys) - off, h: h}
				if nb++; nb == len(batch) {
					dst, lens, keys = s.settle(batch[:nb], elapsed, dst, lens, keys)
					nb = 0
				}
			}
		}
	}
	dst, lens, keys = s.settle(batch[:nb], elapsed, dst, lens, keys)
	clear(s.charged)
	return dst, lens, keys
}

// settle checks the keys of the records a drain took, which are the last
// of keys in the order of batch, against the index, and appends a hit
// for each whose key the index holds its record under and whose policy
// limits, keeping its key in keys; it hands their refusals to the
// sketches, and counts those of the others as untracked.
func (s *shard) settle(batch []taken, elapsed int64, dst []Hit, lens []int, keys []byte) ([]Hit, []int, []byte) {
	if len(batch) == 0 {
		return dst, lens, keys
	}
	kept := batch[0].off // keys[:kept] are the keys kept
	for i := range batch {
		t := &batch[i]
		key := keys[t.off : t.off+t.n]
		if !s.index.holds(t.h, t.ref) {
			s.untracked += uint64(t.rf)
			continue
		}
		pi := match(s.policies, key)
		p := &s.policies[pi]
		if p.Action != Limit {
			continue
		}
		if t.rf != 0 {
			s.refused(pi, t.h, key, uint64(t.rf))
		}
		if t.u == 0 {
			continue
		}
		var q Quota
		if c := s.quotas.get(s.arena.rec(t.ref).policy()); c != nil {
			p, q = c, c.quota // served under a limit a caller stated
		}
		limit := uint64(p.Burst) + uint64(elapsed/p.perToken) + 1 + uint64(s.charged[t.ref])
		dst = append(dst, Hit{Count: uint32(min(uint64(t.u), limit, math.MaxUint32)), Quota: q})
		lens = append(lens, t.n)
		kept += copy(keys[kept:], key)
	}
	return dst, lens, keys[:kept]
}
