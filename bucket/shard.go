package bucket

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// shard is an independently locked part of the table. Its tracked tags
// are records in its arena, found through its index; a record with
// tat <= now and nothing unreported is a full, idle bucket:
// indistinguishable from an absent tag. Its size is a multiple of 64
// bytes, so that neighbouring shards' locks do not share a cache line.
type shard struct {
	shardFields
	_ [64 - unsafe.Sizeof(shardFields{})%64]byte
}

// shardFields are a shard's fields. A query writes the first cache line
// (the lock, the clock, the counts of the first policies) and reads the
// next two (index and policies; the arena's chunks): three lines in all.
// A refused query also counts its key in its policy's sketch (top.go).
type shardFields struct {
	mu       sync.Mutex
	now      int64          // latest now seen: time never runs backwards here
	hot      [3]shardCounts // the counts of policies 0 to 2
	index    index          // 40 bytes
	policies policySet      // the policies the records' policy indexes refer to
	arena    arena          // its chunks first
	more     []shardCounts  // the counts of policies 3 and up

	dirty       []uint32      // records with unreported hits
	slots       *atomic.Int64 // the table's index slots over all shards
	seed        maphash.Seed  // the table's, to find a record's slot again
	capacity    int
	hand        int    // next index slot the idle-entry sweep looks at
	rng         uint64 // xorshift state for eviction sampling
	evictions   uint64
	evictedHits uint64

	refusals  []refusalSketch // per policy refusing since the last harvest (top.go)
	nRefusals int             // refusals[:nRefusals] are in use
	untracked uint64          // refusals past refusalPolicies policies, or of records gone
	counted   []refusalCount  // refused records and their counts (top.go); nil until a refusal
	nCounted  int             // slots of counted in use
}

// shardCounts counts the queries a limit policy answered in one shard.
type shardCounts struct{ ok, no uint64 }

func (s *shard) init(capacity int, seed uint64, hashSeed maphash.Seed, set policySet, slots *atomic.Int64) {
	s.slots = slots
	s.index.init()
	slots.Add(int64(len(s.index.slots)))
	s.arena.init()
	s.seed = hashSeed
	s.capacity = capacity
	s.rng = seed*0x9E3779B97F4A7C15 | 1
	s.policies = set
	s.resetCounts(len(set))
}

// count returns the counts of policy pi.
func (s *shard) count(pi int) *shardCounts {
	if pi < len(s.hot) {
		return &s.hot[pi]
	}
	return &s.more[pi-len(s.hot)]
}

// resetCounts zeroes the counts, for n policies.
func (s *shard) resetCounts(n int) {
	s.hot = [len(s.hot)]shardCounts{}
	s.more = nil
	if n > len(s.hot) {
		s.more = make([]shardCounts, n-len(s.hot))
	}
}

// allow answers a query for key, which hashes to h, under limit policy pi
// at now.
func (s *shard) allow(now int64, h uint64, key []byte, pi int) bool {
	p := &s.policies[pi]
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		ref = s.insert(now, h, pos, key, pi)
	}
	r := s.arena.rec(ref)
	tat := max(r.tat(), now)
	if tat-now > p.allowAt {
		s.refusedRec(pi, h, key, ref)
		if p.DryRun {
			return s.dryRun(pi)
		}
		s.count(pi).no++
		return false
	}
	s.count(pi).ok++
	r.setTat(tat + p.perToken)
	if u := r.unreported(); u < ^uint32(0) {
		r.setUnreported(u + 1)
	}
	if r.dirtyPos() == 0 {
		s.list(r, ref)
	}
	return true
}

// list adds record r, whose reference is ref, to the dirty list. The list
// doubles when full, up to the shard's capacity, rather than growing by
// append's smaller steps, which would leave more garbage behind.
func (s *shard) list(r record, ref uint32) {
	if len(s.dirty) == cap(s.dirty) {
		d := make([]uint32, len(s.dirty), max(min(2*cap(s.dirty), s.capacity), len(s.dirty)+1, 16))
		copy(d, s.dirty)
		s.dirty = d
	}
	s.dirty = append(s.dirty, ref)
	r.setDirtyPos(int32(len(s.dirty)))
}

// spend subtracts hits a peer served for key, which hashes to h, at now.
func (s *shard) spend(now int64, h uint64, key []byte, hits uint32) {
	pi := match(s.policies, key)
	p := &s.policies[pi]
	if p.Action != Limit {
		return
	}
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		ref = s.insert(now, h, pos, key, pi)
	}
	r := s.arena.rec(ref)
	r.setTat(p.plus(r.tat(), hits, now))
}

// reconfigure moves every entry to the policy it matches in set, keeping
// its tokens (capped at the new burst) and its unreported hits, forgets
// entries now under allow or deny, and evicts down to capacity.
func (s *shard) reconfigure(now int64, set policySet, capacity int) {
	for pi := range s.policies {
		c := s.count(pi)
		s.policies[pi].counts.ok.Add(c.ok)
		s.policies[pi].counts.no.Add(c.no)
	}
	old := s.policies
	s.policies, s.capacity = set, capacity
	s.resetCounts(len(set))
	// Removing shifts index slots: list the records first.
	refs := make([]uint32, 0, s.index.count)
	for _, e := range s.index.slots {
		if e != 0 {
			refs = append(refs, uint32(e))
		}
	}
	for _, ref := range refs {
		r := s.arena.rec(ref)
		pi := match(set, r.key())
		p := &set[pi]
		if p.Action != Limit {
			s.removeRef(ref)
			continue
		}
		tokens := old[r.policy()].tokens(r.tat(), now)
		r.setTat(p.tatFor(min(tokens, float64(p.Burst)), now))
		r.setPolicy(pi)
	}
	for s.index.count > s.capacity {
		s.evict(now)
	}
}

// advance moves the shard's clock to now unless now is behind it, and
// returns the clock.
func (s *shard) advance(now int64) int64 {
	if now > s.now {
		s.now = now
	}
	return s.now
}

// insert adds key, which hashes to h and belongs in index slot pos, with a
// full bucket, and returns its record. It first forgets a few idle entries
// the sweep hand passes over, and evicts one entry if the shard is still
// at capacity; the index slot is looked up again if either moved it.
func (s *shard) insert(now int64, h uint64, pos int, key []byte, policy int) uint32 {
	n := s.index.count
	s.sweep(now)
	if s.index.count >= s.capacity {
		s.evict(now)
	}
	if s.index.full() {
		was := len(s.index.slots)
		s.index.grow()
		s.slots.Add(int64(len(s.index.slots) - was))
		n = -1
	}
	if s.index.count != n {
		pos, _ = s.index.lookup(&s.arena, h, key)
	}
	ref := s.arena.newRecord(key, now, policy)
	s.index.put(pos, h, ref)
	return ref
}

// removeAt forgets the entry in index slot pos.
func (s *shard) removeAt(pos int) {
	ref := uint32(s.index.slots[pos])
	r := s.arena.rec(ref)
	if dp := r.dirtyPos(); dp != 0 {
		// Swap the last listed record into this one's place.
		last := s.dirty[len(s.dirty)-1]
		s.dirty[dp-1] = last
		s.arena.rec(last).setDirtyPos(dp)
		s.dirty = s.dirty[:len(s.dirty)-1]
	}
	s.index.delete(pos)
	s.arena.release(ref)
}

// removeRef forgets the entry whose record is ref.
func (s *shard) removeRef(ref uint32) {
	h := maphash.Bytes(s.seed, s.arena.rec(ref).key())
	s.removeAt(s.index.slotOf(h, ref))
}

// The sweep on each insert looks at sweepEntries entries, passing over at
// most sweepSlots index slots.
const (
	sweepEntries = 2
	sweepSlots   = 32
)

// sweep looks at the next few entries from the hand on and forgets the
// full, idle ones among them. Called on every insert, it keeps the table
// close to the set of tags active within the last burst/rate seconds.
func (s *shard) sweep(now int64) {
	slots := s.index.slots
	seen := 0
	for k := 0; k < sweepSlots && seen < sweepEntries; k++ {
		if s.hand >= len(slots) {
			s.hand = 0
		}
		e := slots[s.hand]
		if e == 0 {
			s.hand++
			continue
		}
		seen++
		r := s.arena.rec(uint32(e))
		if r.tat() <= now && r.unreported() == 0 {
			// The slot now holds the entry shifted back into it, if any:
			// look at it next.
			s.removeAt(s.hand)
			continue
		}
		s.hand++
	}
}

// Eviction looks at evictSample entries from a random index slot on, and
// keeps looking, up to evictSearch, while all it has found are in debt. A
// shard of at most evictSearch entries is searched whole, so small tables
// evict in exact order.
const (
	evictSample = 5
	evictSearch = 64
)

// evict removes the least harmful of a sample of entries: the one whose
// loss admits the fewest extra queries (the tokens it lacks plus its
// unreported hits), and an entry in debt only when it found nothing else.
func (s *shard) evict(now int64) {
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	slots := s.index.slots
	whole := s.index.count <= evictSearch
	start := int(s.rng % uint64(len(slots)))
	best, bestHarm, bestDebt := -1, 0.0, false
	seen := 0
	for k := 0; k < len(slots) && seen < evictSearch; k++ {
		if !whole && seen >= evictSample && best >= 0 && !bestDebt {
			break
		}
		i := start + k
		if i >= len(slots) {
			i -= len(slots)
		}
		e := slots[i]
		if e == 0 {
			continue
		}
		seen++
		r := s.arena.rec(uint32(e))
		p := &s.policies[r.policy()]
		lack := max(r.tat()-now, 0)
		debt := lack > p.debtAt
		harm := float64(lack)/float64(p.perToken) + float64(r.unreported())
		if best < 0 || (bestDebt && !debt) || (debt == bestDebt && harm < bestHarm) {
			best, bestHarm, bestDebt = i, harm, debt
		}
	}
	if best < 0 {
		return
	}
	s.evictions++
	s.evictedHits += uint64(s.arena.rec(uint32(slots[best])).unreported())
	s.removeAt(best)
}
