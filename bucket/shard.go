package bucket

import "sync"

// entry is one tracked tag. An entry with tat <= now and nothing unreported
// is a full, idle bucket: indistinguishable from an absent tag.
type entry struct {
	key        string
	tat        int64  // theoretical arrival time, ns; the bucket is full when tat <= now
	unreported uint32 // hits served here and not yet drained
	dirtyPos   int32  // 1 + position in shard.dirty, 0 when not listed
	policy     uint16 // index into the table's policySet
	live       bool
}

// shard is an independently locked part of the table.
type shard struct {
	mu          sync.Mutex
	now         int64 // latest now seen: time never runs backwards here
	index       map[string]int32
	entries     []entry
	free        []int32 // dead slots of entries, for reuse
	dirty       []int32 // slots with unreported hits
	capacity    int
	hand        int    // next slot the idle-entry sweep looks at
	rng         uint64 // xorshift state for eviction sampling
	evictions   uint64
	evictedHits uint64
	_           [64]byte // keep neighbouring shards' locks off one cache line
}

func (s *shard) init(capacity int, seed uint64) {
	s.index = make(map[string]int32)
	s.capacity = capacity
	s.rng = seed*0x9E3779B97F4A7C15 | 1
}

// advance moves the shard's clock to now unless now is behind it, and
// returns the clock.
func (s *shard) advance(now int64) int64 {
	if now > s.now {
		s.now = now
	}
	return s.now
}

// insert adds key with a full bucket and returns its slot. It first forgets
// a few idle entries the sweep hand passes over, and evicts one entry if the
// shard is still at capacity.
func (s *shard) insert(now int64, key string, policy int, set policySet) int32 {
	s.sweep(now, 2)
	if len(s.index) >= s.capacity {
		s.evict(now, set)
	}
	var i int32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		s.entries = append(s.entries, entry{})
		i = int32(len(s.entries) - 1)
	}
	s.entries[i] = entry{key: key, tat: now, policy: uint16(policy), live: true}
	s.index[key] = i
	return i
}

// remove forgets the entry in slot i.
func (s *shard) remove(i int32) {
	e := &s.entries[i]
	if e.dirtyPos != 0 {
		// Swap the last listed slot into this one's place.
		pos := e.dirtyPos - 1
		last := s.dirty[len(s.dirty)-1]
		s.dirty[pos] = last
		s.entries[last].dirtyPos = pos + 1
		s.dirty = s.dirty[:len(s.dirty)-1]
	}
	delete(s.index, e.key)
	*e = entry{}
	s.free = append(s.free, i)
}

// sweep looks at up to n slots from the hand on and forgets the full, idle
// entries among them. Called on every insert, it keeps the table close to
// the set of tags active within the last burst/rate seconds.
func (s *shard) sweep(now int64, n int) {
	for ; n > 0 && len(s.entries) > 0; n-- {
		if s.hand >= len(s.entries) {
			s.hand = 0
		}
		e := &s.entries[s.hand]
		if e.live && e.tat <= now && e.unreported == 0 {
			s.remove(int32(s.hand))
		}
		s.hand++
	}
}

// Eviction looks at evictSample live entries from a random slot on, and
// keeps looking, up to evictSearch, while all it has found are in debt.
// A shard of at most evictSearch entries is searched whole, so small
// tables evict in exact order.
const (
	evictSample = 5
	evictSearch = 64
)

// evict removes the least harmful of a sample of entries: the one whose
// loss admits the fewest extra queries (the tokens it lacks plus its
// unreported hits), and an entry in debt only when it found nothing else.
func (s *shard) evict(now int64, set policySet) {
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	start := int(s.rng % uint64(len(s.entries)))
	best, bestHarm, bestDebt := int32(-1), 0.0, false
	seen := 0
	for k := 0; k < len(s.entries) && seen < evictSearch; k++ {
		if seen >= evictSample && best >= 0 && !bestDebt {
			break
		}
		i := (start + k) % len(s.entries)
		e := &s.entries[i]
		if !e.live {
			continue
		}
		seen++
		p := &set[e.policy]
		lack := max(e.tat-now, 0)
		debt := lack > p.debtAt
		harm := float64(lack)/float64(p.perToken) + float64(e.unreported)
		if best < 0 || (bestDebt && !debt) || (debt == bestDebt && harm < bestHarm) {
			best, bestHarm, bestDebt = int32(i), harm, debt
		}
	}
	if best < 0 {
		return
	}
	s.evictions++
	s.evictedHits += uint64(s.entries[best].unreported)
	s.remove(best)
}
