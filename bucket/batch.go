package bucket

import (
	"hash/maphash"
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
// It is faster than calling Allow for each tag: while it decides one
// query, it has already asked the memory for the entries of the next few,
// so that at a million tags their cache misses overlap instead of
// following one another.
func (t *Table) AllowBatch(now time.Time, tags [][]byte, ok []bool) {
	_ = ok[:len(tags)]
	for len(tags) > 0 {
		n := min(len(tags), batchMax)
		t.allowBatch(now, tags[:n], ok[:n])
		tags, ok = tags[n:], ok[n:]
	}
}

// Looking ahead: while deciding query i, AllowBatch has asked for the
// record of query i+recordAhead, and for the index slot and the shard's
// lock of query i+slotAhead, so that each is in the cache by the time it
// is needed. The lock and the record are asked for with intent to write:
// the other CPUs give up their copies at once.
const (
	slotAhead   = 12
	recordAhead = 6
)

// Below lookAheadSlots index slots in all (some ten thousand tags), the
// table is small enough to stay in the CPU's caches: looking ahead would
// cost more than it saves. Measured on the line server: at 10,000 tags,
// looking ahead saves a little (the table shares the caches with the
// kernel's socket buffers and the other connections); at a million, it
// halves the cost of a decision. (A variable only so that tests can force
// either way.)
var lookAheadSlots int64 = 1 << 14

func (t *Table) allowBatch(now time.Time, tags [][]byte, ok []bool) {
	var hs [batchMax]uint64
	long := int(t.maxTagBytes.Load())
	set := t.policies.Load()
	ns := now.UnixNano()
	n := len(tags)
	ahead := slotAhead
	if t.slots.Load() < lookAheadSlots {
		ahead = 0
	}
	for i := 0; i < n+ahead; i++ {
		if j := i; j < n {
			if tag := tags[j]; len(tag) != 0 && len(tag) <= long {
				h := maphash.Bytes(t.seed, tag)
				hs[j] = h
				if ahead > 0 {
					s := &t.shards[h>>t.shift]
					s.index.prefetch(h)
					prefetchw(unsafe.Pointer(&s.mu))
				}
			}
		}
		if j := i - (slotAhead - recordAhead); ahead > 0 && j >= 0 && j < n && hs[j] != 0 {
			t.shards[hs[j]>>t.shift].prefetchRecord(hs[j])
		}
		j := i - ahead
		if j < 0 {
			continue
		}
		tag := tags[j]
		if len(tag) == 0 || len(tag) > long {
			ok[j] = t.Allow(now, tag)
			continue
		}
		pi := match(*set, tag)
		if p := &(*set)[pi]; p.Action != Limit {
			ok[j] = p.answer()
			continue
		}
		ok[j] = t.allowKey(ns, tag, hs[j], set, pi)
	}
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
	ref := uint32(e)
	chunks := *s.arena.pub.Load()
	if c := int(ref >> refOffBits); c < len(chunks) {
		if off := int(ref&refOffMask) << 3; off < len(chunks[c]) {
			prefetchw(unsafe.Pointer(&chunks[c][off]))
		}
	}
}
