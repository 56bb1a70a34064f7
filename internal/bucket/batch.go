package bucket

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// batchMax is how many queries AllowBatch handles in one pass.
const batchMax = 64

// AllowBatch answers the queries for tags, all at now, setting ok[i] to
// what Allow(now, tags[i]) would return, in order: a tag asked twice in
// one batch is answered as if asked twice in a row. It panics if ok is
// shorter than tags. It does not retain tags.
//
// It is faster than calling Allow for each tag: it takes each shard's
// lock once for all the batch's queries in that shard, and while it
// decides one query, it has already asked the memory for the entries of
// the next few, so that at a million tags their cache misses overlap
// instead of following one another.
func (t *Table) AllowBatch(now time.Time, tags [][]byte, ok []bool) {
	_ = ok[:len(tags)]
	if len(tags) == 1 {
		// Nothing to share a lock with or to look ahead to.
		ok[0] = t.Allow(now, tags[0])
		return
	}
	for len(tags) > 0 {
		n := min(len(tags), batchMax)
		if !t.allowBatch(now, tags[:n], ok[:n]) {
			// A tag long enough to be keyed by a digest: decide in order,
			// one by one (see allowBatch).
			for i, tag := range tags[:n] {
				ok[i] = t.Allow(now, tag)
			}
		}
		tags, ok = tags[n:], ok[n:]
	}
}

// Looking ahead: while deciding the query at position k of a batch in
// shard order, AllowBatch has asked for the index slot of the query at
// k+slotAhead and the record of the one at k+recordAhead, so that each is
// in the cache by the time it is needed. Records are asked for with intent
// to write: the other CPUs give up their copies at once.
const (
	slotAhead   = 12
	recordAhead = 6
)

// Below lookAheadSlots index slots in all (some three thousand tags), the
// table is small enough to stay in the CPU's first caches: looking ahead
// would cost more than it saves. Above, it pays even while the table fits
// in the second-level cache, because on the line server that cache is
// shared with the kernel's socket buffers and the clients: measured at
// 10,000 tags, looking ahead cut the daemon's CPU time per decision by
// 3-10%; at a million, the cost of a decision halves. (A variable only so
// that tests can force either way.)
var lookAheadSlots int64 = 1 << 12

// allowBatch decides up to batchMax queries. It answers the ones no shard
// needs at once (empty tags, allow and deny policies); the rest it sorts
// by shard, keeping their order within each shard, and decides shard by
// shard, taking each shard's lock once. That gives the answers Allow would
// give in order: queries in different shards do not affect each other
// (each shard inserts, sweeps and evicts on its own), and the order within
// a shard is kept. A tag longer than the table keeps verbatim is keyed by
// a digest that allowBatch does not compute: it then decides nothing and
// reports false, and the caller decides the batch one by one.
func (t *Table) allowBatch(now time.Time, tags [][]byte, ok []bool) bool {
	var (
		hs     [batchMax]uint64
		pis    [batchMax]uint16 // policy index of each limited query
		order  [batchMax]uint8  // the limited queries, grouped by shard
		counts [maxShards + 1]uint8
		limit  [batchMax]bool
	)
	long := int(t.maxTagBytes.Load())
	set := t.policies.Load()
	ahead := t.slots.Load() >= lookAheadSlots
	limited := 0
	for _, tag := range tags {
		if len(tag) > long {
			return false
		}
	}
	for j, tag := range tags {
		if len(tag) == 0 {
			ok[j] = true
			continue
		}
		pi := match(*set, tag)
		if p := &(*set)[pi]; p.Action != Limit {
			ok[j] = p.answer()
			continue
		}
		h := Hash(t.seed, tag)
		hs[j], pis[j], limit[j] = h, uint16(pi), true
		counts[h>>t.shift+1]++
		limited++
	}
	if limited == 0 {
		return true
	}
	// counts[i] becomes where shard i's queries start in order.
	for i := 1; i <= len(t.shards); i++ {
		counts[i] += counts[i-1]
	}
	for j := range tags {
		if limit[j] {
			si := hs[j] >> t.shift
			order[counts[si]] = uint8(j)
			counts[si]++
		}
	}
	// Now counts[i] is where shard i's queries end.
	if ahead {
		for k := range min(slotAhead, limited) {
			h := hs[order[k]]
			t.shards[h>>t.shift].index.prefetch(h)
		}
		for k := range min(recordAhead, limited) {
			h := hs[order[k]]
			t.shards[h>>t.shift].prefetchRecord(h)
		}
	}
	ns := now.UnixNano()
	for k := 0; k < limited; {
		si := hs[order[k]] >> t.shift
		s := &t.shards[si]
		end := int(counts[si])
		s.mu.Lock()
		at := s.advance(ns)
		swapped := &s.policies[0] != &(*set)[0]
		for ; k < end; k++ {
			if ahead {
				if k+slotAhead < limited {
					h := hs[order[k+slotAhead]]
					t.shards[h>>t.shift].index.prefetch(h)
				}
				if k+recordAhead < limited {
					h := hs[order[k+recordAhead]]
					t.shards[h>>t.shift].prefetchRecord(h)
				}
			}
			j := order[k]
			pi := int(pis[j])
			if swapped {
				// A reload swapped the policies in between: ask the shard's.
				if pi = match(s.policies, tags[j]); s.policies[pi].Action != Limit {
					ok[j] = s.policies[pi].answer()
					continue
				}
			}
			ok[j] = s.allow(at, hs[j], tags[j], pi)
		}
		s.mu.Unlock()
	}
	return true
}

// prefetchRecord starts loading into the cache, for writing, the record
// the home slot of h refers to, if its fragment matches. It may be called without the
// lock: it reads only published slots and chunks, atomically.
func (s *shard) prefetchRecord(h uint64) {
	slots := *s.index.pub.Load()
	e := atomic.LoadUint64(&slots[home(uint32(h), len(slots))])
	if e == 0 || uint32(e>>32) != uint32(h) {
		return
	}
	if off := uint64(uint32(e)) << 3; off < uint64(len(s.arena.reg.records)) {
		prefetchw(unsafe.Pointer(&s.arena.reg.records[off]))
	}
}
