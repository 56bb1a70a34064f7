package bucket

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// This file owns the refusals' side of "who is throttled": a refusal
// counts in its record, as a refusal made in process does (an add on the
// record the decision has just read), and the shard lists the records
// whose count it raised from 0; the harvest (TakeRefusals) moves each
// listed record's count into small heavy-hitter sketches per policy
// (package topk), once per interval, asking for the records ahead of
// taking them. Refusals made in process mark their
// records in the dirty bitmap instead, and a drain for the peers (Drain)
// moves them. The served side needs no counting here: served hits are
// drained for the peers anyway (Drain), and PolicyName attributes them.
//
// Memory: nothing per record beyond its refusal count, which the state
// file's layout already holds for processes deciding in process, and 4
// bytes per record refused in the interval in the shard's list (at most
// the shard's capacity; past it, records are marked dirty and the harvest
// walks the bitmap); a shard makes a sketch the first time a policy
// refuses in it, keeping it for reuse once harvested; at most
// refusalPolicies sketches per shard, each of refusalK counters and
// refusalFilter filter counters (a filtered sketch: the many light keys
// of a flood cost a probe and an increment, not a counter taken over).
// So the sketches take at most Shards() × min(policies that refuse,
// refusalPolicies) × about 8 KiB with keys of 20 bytes: 8 shards and two
// policies refusing, 128 KiB; whatever the number of tags.
//
// Error: a key falls in one shard only, so each shard's sketch sees all
// of its key's refusals under that policy, each record's once per
// harvest with its count (exact, but for a refusal made in process lost
// beside one of the daemon's: refusedRec), and Space-Saving's bound holds
// per shard:
// a key's count is over its true count by at most its shard's refusals of
// the policy in the interval over refusalK, about the policy's refusals
// over Shards()×refusalK, and each item says by how much (its Err).
// Refusals of a record freed before the harvest (forgotten, evicted), or
// whose key a caller overwrote (trust.go), are counted as untracked.

// refusalK is how many counters each shard's sketch of one policy's
// refusals has, refusalFilter how many filter counters, and
// refusalPolicies how many policies a shard counts refusals for in one
// interval.
const (
	refusalK        = 32
	refusalFilter   = 512
	refusalPolicies = 16
)

// refusalSketch counts the keys one policy refused in one shard.
type refusalSketch struct {
	pi   int    // the policy's index in the shard's policies; -1 once a reload removed it
	name string // the policy's name, as harvested
	sk   *topk.Sketch
}

// Refusals are the heaviest keys one policy refused since the last
// TakeRefusals, over the whole table: the keys' counts and errors, every
// refusal of the policy counted (Total), and the most a key not listed
// was refused (Floor). Under a DryRun policy a query the limit would
// have refused counts as refused here, though it was served.
type Refusals struct {
	Policy string
	topk.Summary
}

// refusedRec counts a refusal of the record at ref, in the record: the
// harvest hands it to its policy's sketch. The caller holds the shard's
// lock and has just read the record, so the count is a plain load and
// store on a line in the cache, not a locked add (Go's atomic store is
// locked too): a refusal a process deciding in process counts in the
// same record between the two can be lost, which a heavy-hitter count
// can afford.
func (s *shard) refusedRec(ref uint32) {
	p := s.arena.rec(ref).u32(recRefused)
	c := *p
	*p = c + 1
	if c != 0 {
		return
	}
	if len(s.refusedRefs) < max(s.capacity, 1024) {
		s.refusedRefs = append(s.refusedRefs, ref)
	} else {
		s.arena.reg.markDirty(ref)
		s.spilled = true
	}
}

// dropRefused counts the refusals of record ref, about to be killed, as
// untracked: there will be no key to name them.
func (s *shard) dropRefused(ref uint32) {
	s.untracked += uint64(s.arena.rec(ref).refusedCount())
}

// collectRefused hands the refusals counted in the records the shard
// listed to the sketches; when the list overflowed, it walks the dirty
// bitmap too, whose bits it leaves for the next drain (which also finds
// the refusals made in process). A listed record may have been freed
// since, its count then 0, or taken again by another key, whose
// refusals it then counts. The caller holds the shard's lock, and calls
// it before the policies' indexes change.
func (s *shard) collectRefused() {
	// The listed records lie anywhere in the area, in the order they
	// were refused: each is asked for harvestAhead records before it is
	// taken, so that their cache misses overlap instead of following one
	// another.
	refs := s.refusedRefs
	for _, ref := range refs[:min(harvestAhead, len(refs))] {
		s.prefetchRef(ref)
	}
	for i, ref := range refs {
		if i+harvestAhead < len(refs) {
			s.prefetchRef(refs[i+harvestAhead])
		}
		if r := s.arena.rec(ref); r.refusedCount() != 0 {
			s.refusedFrom(ref, s.arena.largest, r.takeRefused())
		}
	}
	s.refusedRefs = refs[:0]
	if !s.spilled {
		return
	}
	s.spilled = false
	reg := s.arena.reg
	for ci := range s.arena.chunks {
		c := &s.arena.chunks[ci]
		w0 := c.ref >> 6
		for w := range c.live {
			set := atomic.LoadUint64(&reg.dirty[w0+uint32(w)]) & c.live[w]
			for set != 0 {
				ref := c.ref + uint32(w*64+bits.TrailingZeros64(set))
				set &= set - 1
				if r := s.arena.rec(ref); r.refusedCount() != 0 {
					s.refusedFrom(ref, c.size, r.takeRefused())
				}
			}
		}
	}
}

// harvestAhead is how many listed records ahead the harvest asks for.
const harvestAhead = 32

// prefetchRef starts loading record ref: its first line for writing (the
// harvest takes its count), and the line after it where a record of a
// key of up to 20 bytes, 40 bytes long, crosses into it.
func (s *shard) prefetchRef(ref uint32) {
	if off := uint64(ref) << 3; off+40 < uint64(len(s.arena.reg.records)) {
		prefetchw(unsafe.Pointer(&s.arena.reg.records[off]))
		prefetch(unsafe.Pointer(&s.arena.reg.records[off+40]))
	}
}

// refusedFrom hands rf refusals of record ref, whose chunk's records are
// at most size bytes, to the sketch of its policy (the one its key matched,
// which the record keeps); none for a key with no bucket. A record whose
// key is not the one the index holds it under (ownKey) has its refusals
// counted as untracked.
func (s *shard) refusedFrom(ref, size uint32, rf uint32) {
	if rf == 0 {
		return
	}
	key, h, own := s.ownKey(s.keyBuf[:0], ref, size)
	s.keyBuf = key[:0]
	if !own {
		s.untracked += uint64(rf)
		return
	}
	pi := s.arena.rec(ref).policy()
	if pi >= quotaBase && s.quotas.get(pi) != nil {
		pi = match(s.policies, key) // under a limit a caller stated: its policy's sketch
	}
	if pi < len(s.policies) && s.policies[pi].Action == Limit {
		s.refused(pi, h, key, uint64(rf))
	}
}

// refused counts n refusals of key, which hashes to h, under limit
// policy pi, in the policy's sketch. The caller holds the shard's lock.
func (s *shard) refused(pi int, h uint64, key []byte, n uint64) {
	for i := range s.refusals[:s.nRefusals] {
		if r := &s.refusals[i]; r.pi == pi {
			r.sk.AddHash(h, key, n)
			return
		}
	}
	s.refusedFirst(pi, h, key, n)
}

// refusedFirst counts the first refusal of policy pi since the last
// harvest: it takes the next sketch, making it if it is the first time
// so many policies refused in the shard, or counts the refusal as
// untracked past refusalPolicies.
func (s *shard) refusedFirst(pi int, h uint64, key []byte, n uint64) {
	if s.nRefusals == refusalPolicies {
		s.untracked += n
		return
	}
	if s.nRefusals == len(s.refusals) {
		s.refusals = append(s.refusals, refusalSketch{sk: topk.NewFiltered(refusalK, refusalFilter)})
	}
	r := &s.refusals[s.nRefusals]
	s.nRefusals++
	r.pi, r.name = pi, s.policies[pi].Name
	r.sk.AddHash(h, key, n)
}

// remapRefusals points the sketches at their policies' places in a new
// policy set, by name (byName gives a name's index in the set); a sketch
// whose policy is gone, or no longer limits, keeps what it counted for
// the next harvest and counts nothing more. The caller holds the lock.
func (s *shard) remapRefusals(set policySet, byName map[string]int) {
	for i := range s.refusals[:s.nRefusals] {
		r := &s.refusals[i]
		pi, ok := byName[r.name]
		if !ok || set[pi].Action != Limit {
			pi = -1
		}
		r.pi = pi
	}
}

// TakeRefusals appends to dst, for each policy that refused a query since
// the last call, its heaviest refused keys (every key a shard kept, at
// most Shards()×32), heaviest first, and empties the sketches: the caller
// harvests once per interval. It takes each shard's lock in turn, as
// Drain does. untracked counts refusals that no sketch counted: those of
// the policies past the 16th to refuse in one shard within one interval
// (they are in no Total).
//
// A reload (Reconfigure) keeps a policy's refusals under its name; the
// refusals of a policy it removes are harvested under the old name.
// Refusals of allow and deny policies are never counted: they keep no
// bucket.
func (t *Table) TakeRefusals(dst []Refusals) (_ []Refusals, untracked uint64) {
	first := len(dst)
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		s.collectRefused()
		for j := range s.refusals[:s.nRefusals] {
			r := &s.refusals[j]
			k := first
			for k < len(dst) && dst[k].Policy != r.name {
				k++
			}
			if k == len(dst) {
				dst = append(dst, Refusals{Policy: r.name})
			}
			// A key is refused in its own shard only: the shards' lists
			// add up without overlapping, and a key a shard left out was
			// refused at most that shard's floor times.
			d := &dst[k]
			d.Items = append(d.Items, r.sk.Top(refusalK)...)
			d.Total += r.sk.Total()
			d.Floor = max(d.Floor, r.sk.Floor())
			r.sk.Reset()
			r.name = ""
		}
		s.nRefusals = 0
		untracked += s.untracked
		s.untracked = 0
		s.mu.Unlock()
	}
	for k := first; k < len(dst); k++ {
		topk.SortItems(dst[k].Items)
	}
	return dst, untracked
}

// PolicyName returns the name of the policy that governs key now: the
// policy a served hit drained for key (Drain) counts under.
func (t *Table) PolicyName(key string) string {
	s := *t.policies.Load()
	return s[match(s, key)].Name
}
