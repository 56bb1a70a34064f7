package bucket

import (
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
	quotas   *quotas        // the table's stated limits, which indexes from quotaBase on refer to
	arena    arena          // its chunks first
	more     []shardCounts  // the counts of policies 3 and up

	id          int               // the shard's number in the table
	slots       *atomic.Int64     // the table's index slots over all shards
	seed        uint64            // the table's, to find a record's slot again
	lastDrain   int64             // when Drain last took the shard's hits
	born        int64             // the first now the shard saw
	charged     map[uint32]uint32 // hits charged per record since the last drain (charge.go)
	noRoom      uint64            // tags not tracked for want of room in the region
	capacity    int
	hand        int    // next index slot the idle-entry sweep looks at
	rng         uint64 // xorshift state for eviction sampling
	evictions   uint64
	evictedHits uint64

	refusals    []refusalSketch // per policy refusing since the last harvest (top.go)
	nRefusals   int             // refusals[:nRefusals] are in use
	untracked   uint64          // refusals past refusalPolicies policies, or of records gone
	refusedRefs []uint32        // records whose refusals this shard raised from 0 since the harvest
	spilled     bool            // some were marked in the dirty bitmap instead: refusedRefs was full
	keyBuf      []byte          // a key read back from a record, checked (trust.go)
}

// shardCounts counts the queries a limit policy answered in one shard.
type shardCounts struct{ ok, no uint64 }

func (s *shard) init(id int, reg *region, capacity int, seed uint64, hashSeed uint64, set policySet, slots *atomic.Int64) {
	s.id = id
	s.slots = slots
	s.index.init(reg, id)
	slots.Add(int64(len(s.index.slots)))
	s.arena.init(reg)
	s.arena.seed = hashSeed
	s.seed = hashSeed
	s.capacity = capacity
	s.rng = seed*0x9E3779B97F4A7C15 | 1
	s.policies = set
	s.resetCounts(len(set))
}

// setQuotas gives the shard its table's registry of stated limits.
func (s *shard) setQuotas(q *quotas) { s.quotas = q }

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
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			s.count(pi).ok++ // no room to track it: a full bucket serves
			return true
		}
	}
	r := s.arena.rec(ref)
	if r.policy() >= quotaBase {
		// Under a limit a caller stated: it applies to every query.
		p = s.policyOf(r)
		now = p.at(now)
	}
	for {
		// Processes deciding in process change tat too, without the lock:
		// a compare-and-swap keeps their tokens and ours apart.
		tat0 := r.tat()
		tat := max(tat0, now)
		if tat-now > p.allowAt {
			s.refusedRec(ref)
			if s.policies[pi].DryRun {
				return s.dryRun(pi)
			}
			s.count(pi).no++
			return false
		}
		if r.casTat(tat0, tat+p.perToken) {
			break
		}
	}
	s.count(pi).ok++
	s.unreported(r, ref, 1)
	return true
}

// unreported counts n hits on record r, whose reference is ref, for the
// next report.
func (s *shard) unreported(r record, ref uint32, n uint32) {
	if r.addUnreported(n) == 0 {
		s.arena.reg.markDirty(ref)
	}
}

// casPlus moves record r's tat to what f makes of it, however callers
// deciding in process move it meanwhile.
func casPlus(r record, f func(tat int64) int64) {
	for {
		tat := r.tat()
		if r.casTat(tat, f(tat)) {
			return
		}
	}
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
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			return
		}
	}
	r := s.arena.rec(ref)
	if p = s.policyOf(r); p.window != 0 {
		now = p.at(now)
	}
	casPlus(r, func(tat int64) int64 { return p.plus(tat, hits, now) })
}

// reconfigure moves every entry to the policy it matches in set, keeping
// its tokens (capped at the new burst) and its unreported hits, forgets
// entries now under allow or deny, and those whose key a caller
// overwrote (ownKey), and evicts down to capacity.
func (s *shard) reconfigure(now int64, set policySet, capacity int) {
	for pi := range s.policies {
		c := s.count(pi)
		s.policies[pi].counts.ok.Add(c.ok)
		s.policies[pi].counts.no.Add(c.no)
	}
	old := s.policies
	s.policies, s.capacity = set, capacity
	s.resetCounts(len(set))
	// Removing shifts index slots: list the entries first.
	entries := make([]uint64, 0, s.index.count)
	for _, e := range s.index.slots {
		if e != 0 {
			entries = append(entries, e)
		}
	}
	for _, e := range entries {
		ref := uint32(e)
		r := s.arena.rec(ref)
		key, own := s.ownKeyAt(s.keyBuf[:0], e)
		s.keyBuf = key[:0]
		pi := 0
		if own {
			pi = match(set, key)
		}
		p := &set[pi]
		if !own || p.Action != Limit {
			r.kill()
			s.removeEntry(e)
			continue
		}
		op := r.policy()
		if c := s.quotas.get(op); c != nil && p.Quotas != QuotaNone {
			continue // keeps the limit its callers stated
		}
		was := &old[0]
		if op < len(old) {
			was = &old[op]
		} else if c := s.quotas.get(op); c != nil {
			was = c
		}
		r.setPolicy(pi)
		casPlus(r, func(tat int64) int64 {
			return p.tatFor(min(was.tokens(tat, was.at(now)), float64(p.Burst)), now)
		})
	}
	for s.index.count > s.capacity {
		s.evict(now)
	}
}

// advance moves the shard's clock to now unless now is behind it, and
// returns the clock.
func (s *shard) advance(now int64) int64 {
	if now > s.now {
		if s.now == 0 {
			s.born = now
		}
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
		if s.index.grow() {
			s.slots.Add(int64(len(s.index.slots) - was))
		} else {
			// The index area is full: a reload raised max_tags past
			// what the region was laid out for.
			s.evict(now)
		}
		n = -1
	}
	full := now // a new record's bucket is full: its tat is its instant
	if policy >= quotaBase {
		full = s.compiledAt(policy).at(now)
	}
	ref := s.arena.newRecord(key, full, policy)
	for try := 0; ref == 0 && try < 8 && s.index.count > 0; try++ {
		// The region is full: free a record and take it if it fits.
		s.evict(now)
		n = -1
		ref = s.arena.newRecord(key, full, policy)
	}
	if ref == 0 {
		s.noRoom++
		return 0
	}
	if s.index.count != n {
		pos = s.index.free(h)
	}
	s.index.put(pos, h, ref)
	return ref
}

// removeAt forgets the entry in index slot pos, whose record must be
// killed already.
func (s *shard) removeAt(pos int) {
	ref := uint32(s.index.slots[pos])
	s.index.delete(pos)
	s.arena.release(ref)
	delete(s.charged, ref)
}

// removeEntry forgets the entry e of the index, whose record must be
// killed already. It finds e's slot from e's own fragment, whatever the
// record's key has become.
func (s *shard) removeEntry(e uint64) {
	s.removeAt(s.index.slotOf(e>>32, uint32(e)))
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
		if tat := r.tat(); tat <= s.policyOf(r).at(now) && r.unreported() == 0 && r.refusedCount() == 0 && r.casTat(tat, deadTat) {
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
		p := s.policyOf(r)
		var lack int64 // a caller may have written any tat: no overflow
		if tat, at := r.tat(), p.at(now); tat > at {
			lack = tat - at
		}
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
	s.dropRefused(uint32(slots[best]))
	s.evictedHits += uint64(s.arena.rec(uint32(slots[best])).kill())
	s.removeAt(best)
}

// policyOf returns record r's policy. A caller deciding in process may
// have overwritten the index: one out of range is the default's.
func (s *shard) policyOf(r record) *compiled {
	return s.compiledAt(r.policy())
}

// compiledAt returns the policy or the stated limit of index pi; the
// default policy for an index that names neither.
func (s *shard) compiledAt(pi int) *compiled {
	if pi < len(s.policies) {
		return &s.policies[pi]
	}
	if c := s.quotas.get(pi); c != nil {
		return c
	}
	return &s.policies[0]
}
