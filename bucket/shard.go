package bucket

import (
	"math/bits"
	"sync"
)

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
	now         int64     // latest now seen: time never runs backwards here
	policies    policySet // the policies the entries' policy indexes refer to
	counts      []shardCounts
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

// shardCounts counts the queries a limit policy answered in one shard.
type shardCounts struct{ ok, no uint64 }

func (s *shard) init(capacity int, seed uint64, set policySet) {
	s.index = make(map[string]int32)
	s.capacity = capacity
	s.rng = seed*0x9E3779B97F4A7C15 | 1
	s.policies = set
	s.counts = make([]shardCounts, len(set))
}

// allow answers a query for key under limit policy pi at now.
func (s *shard) allow(now int64, key []byte, pi int) bool {
	p := &s.policies[pi]
	i, ok := s.index[string(key)]
	if !ok {
		i = s.insert(now, string(key), pi)
	}
	e := &s.entries[i]
	tat := max(e.tat, now)
	if tat-now > p.allowAt {
		s.counts[pi].no++
		return false
	}
	s.counts[pi].ok++
	e.tat = tat + p.perToken
	if e.unreported < ^uint32(0) {
		e.unreported++
	}
	if e.dirtyPos == 0 {
		s.dirty = append(s.dirty, i)
		e.dirtyPos = int32(len(s.dirty))
	}
	return true
}

// spend subtracts hits a peer served for key at now.
func (s *shard) spend(now int64, key string, hits uint32) {
	pi := match(s.policies, key)
	p := &s.policies[pi]
	if p.Action != Limit {
		return
	}
	i, ok := s.index[key]
	if !ok {
		i = s.insert(now, key, pi)
	}
	e := &s.entries[i]
	tat := max(e.tat, now)
	hi, add := bits.Mul64(uint64(hits), uint64(p.perToken))
	if hi != 0 || add > maxAhead || tat-now > maxAhead-int64(add) {
		tat = now + maxAhead
	} else {
		tat += int64(add)
	}
	e.tat = tat
}

// reconfigure moves every entry to the policy it matches in set, keeping
// its tokens (capped at the new burst) and its unreported hits, forgets
// entries now under allow or deny, and evicts down to capacity.
func (s *shard) reconfigure(now int64, set policySet, capacity int) {
	for pi, c := range s.counts {
		s.policies[pi].counts.ok.Add(c.ok)
		s.policies[pi].counts.no.Add(c.no)
	}
	old := s.policies
	s.policies, s.counts, s.capacity = set, make([]shardCounts, len(set)), capacity
	for i := range s.entries {
		e := &s.entries[i]
		if !e.live {
			continue
		}
		pi := match(set, e.key)
		p := &set[pi]
		if p.Action != Limit {
			s.remove(int32(i))
			continue
		}
		tokens := old[e.policy].tokens(e.tat, now)
		e.tat = p.tatFor(min(tokens, float64(p.Burst)), now)
		e.policy = uint16(pi)
	}
	for len(s.index) > s.capacity {
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

// insert adds key with a full bucket and returns its slot. It first forgets
// a few idle entries the sweep hand passes over, and evicts one entry if the
// shard is still at capacity.
func (s *shard) insert(now int64, key string, policy int) int32 {
	s.sweep(now, 2)
	if len(s.index) >= s.capacity {
		s.evict(now)
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
func (s *shard) evict(now int64) {
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
		p := &s.policies[e.policy]
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
