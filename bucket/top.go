package bucket

import (
	"github.com/dthrottle/dthrottle/topk"
)

// This file owns the refusals' side of "who is throttled": each shard
// counts the records it refuses, exactly, in a table of its own (a probe
// and an increment under the lock the decision already holds, with the
// hash it already computed), and moves them, each with its count, into
// small heavy-hitter sketches per policy (package topk) when
// TakeRefusals harvests them once per interval; past the table's room,
// a refusal goes to the sketch at once. The served side needs no counting
// here: served hits are drained for the peers anyway (Drain), and
// PolicyName attributes them.
//
// Memory: a shard makes its table (refusalSlots slots of 16 bytes, 64
// KiB) on its first refusal, and a sketch the first time a policy
// refuses in it, keeping both for reuse once harvested; at most
// refusalPolicies sketches per shard, each of refusalK counters and
// refusalFilter filter counters (a filtered sketch: the many light keys
// of a flood cost a probe and an increment, not a counter taken over).
// So at most Shards() × (64 KiB + min(policies that refuse,
// refusalPolicies) × about 8 KiB with keys of 20 bytes): 8 shards and two
// policies refusing, 640 KiB; whatever the number of tags.
//
// Error: a key falls in one shard only, so each shard's sketch sees all
// of its key's refusals under that policy, whether counted in the table
// first or not, and Space-Saving's bound holds per shard: a key's count
// is over its true count by at most its shard's refusals of the policy in
// the interval over refusalK, about the policy's refusals over
// Shards()×refusalK, and each item says by how much (its Err).

// refusalK is how many counters each shard's sketch of one policy's
// refusals has, refusalFilter how many filter counters, and
// refusalPolicies how many policies a shard counts refusals for in one
// interval.
const (
	refusalK        = 32
	refusalFilter   = 512
	refusalPolicies = 16
)

// refusalSlots is the size of each shard's table of refused records,
// refusalFull how many it holds before new records go to the sketches at
// once, refusalProbe how many slots a record is looked for in.
const (
	refusalSlots = 4096
	refusalFull  = refusalSlots * 3 / 4
	refusalProbe = 8
)

// refusalCount is one refused record and its refusals since the last
// harvest; ref 0 is an empty slot.
type refusalCount struct {
	h   uint64
	ref uint32
	n   uint32
}

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

// refusedRec counts a refusal of the record ref, whose key hashes to h,
// under limit policy pi: exactly, in the shard's table of refused records
// (refusalSlots slots, probed from h), so that a refusal costs a probe and
// an increment, and the sketches take each record once per harvest with
// its count (flushCounted); in the sketch at once when the table has no
// room near h. The caller holds the shard's lock.
func (s *shard) refusedRec(pi int, h uint64, key []byte, ref uint32) {
	if s.counted == nil {
		s.counted = make([]refusalCount, refusalSlots)
	}
	i := int(h >> 32)
	for p := range refusalProbe {
		c := &s.counted[(i+p)&(refusalSlots-1)]
		if c.ref == ref && c.h == h {
			if c.n == ^uint32(0) {
				break // saturated: the sketch takes the rest
			}
			c.n++
			return
		}
		if c.ref == 0 {
			if s.nCounted == refusalFull {
				break
			}
			*c = refusalCount{h: h, ref: ref, n: 1}
			s.nCounted++
			return
		}
	}
	s.refused(pi, h, key, 1)
}

// flushCounted moves the table of refused records into the sketches, each
// record with its count, and empties it. A record freed since its
// refusals (forgotten, evicted, its place taken by another key) is no
// longer there to name them: they count as untracked. The caller holds
// the shard's lock, and calls it before the policies' indexes change.
func (s *shard) flushCounted() {
	if s.nCounted == 0 {
		return
	}
	for i := range s.counted {
		c := &s.counted[i]
		if c.ref == 0 {
			continue
		}
		r := s.arena.rec(c.ref)
		pi := r.policy()
		if pi < len(s.policies) && s.policies[pi].Action == Limit {
			if key := r.key(); Hash(s.seed, key) == c.h {
				s.refused(pi, c.h, key, uint64(c.n))
				*c = refusalCount{}
				continue
			}
		}
		s.untracked += uint64(c.n)
		*c = refusalCount{}
	}
	s.nCounted = 0
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
		s.flushCounted()
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
