package bucket

import (
	"math"
	"math/bits"
	"time"
)

// This file owns the table's export and conservative merge: what a state
// file and a snapshot sent to a restarting peer are made of.
//
// Levels cross between nodes in one frame, the reported one: a bucket as
// if the node's own unreported hits had not been served. Those hits reach
// every peer in the node's next report, so a level that held them would
// have its peers count them twice (docs/design.md, "Every hit counts
// once"). ExportShard gives the whole level, for the node's own state
// file; ReportedShard the reported one, for a peer; Merge compares a level
// with the table's own reported level and puts the table's unreported
// hits back on top.

// Level is one tag's bucket as exported: its key and how many tokens it
// held at the instant of the export. Only buckets below their burst are
// exported (a full bucket is the same as an absent tag); Tokens is
// negative for a bucket in debt.
type Level struct {
	// Key is the tag's key as the table keeps it (a long tag in digest
	// form). In what ExportShard and Export return, it aliases a buffer
	// that the next call reuses.
	Key    []byte
	Tokens float64
	// Quota is the limit a caller stated for the tag, which the level is
	// under; the zero Quota (Burst 0) for the tag's policy.
	Quota Quota
}

// Shards is how many parts the table is split in: ExportShard takes a
// part's number, from 0 to Shards()-1.
func (t *Table) Shards() int { return len(t.shards) }

// ExportShard appends to dst the level at now of every tag of shard i
// whose bucket is below its burst, and their keys to keys, and returns
// both: the whole level, the node's unreported hits included, as the
// node's own state file keeps it. The levels' keys alias keys. It holds
// the shard's lock while it copies the shard's records, and no other; with
// buffers reused from the last call, it does not allocate. Nothing in the
// table changes. A record whose key a caller overwrote is no tag the
// table keeps, and is left out (trust.go). It panics if i is not in [0, Shards()).
func (t *Table) ExportShard(now time.Time, i int, dst []Level, keys []byte) ([]Level, []byte) {
	return t.exportShard(now, i, dst, keys, false)
}

// ReportedShard is ExportShard in the reported frame, for a peer: each
// level without the unreported hits the table holds for its tag (the
// peer counts those from the next report), and only the tags still below
// their burst without them.
func (t *Table) ReportedShard(now time.Time, i int, dst []Level, keys []byte) ([]Level, []byte) {
	return t.exportShard(now, i, dst, keys, true)
}

func (t *Table) exportShard(now time.Time, i int, dst []Level, keys []byte, reported bool) ([]Level, []byte) {
	s := &t.shards[i]
	first, keyStart := len(dst), len(keys)
	s.mu.Lock()
	n := max(s.now, now.UnixNano())
	for _, e := range s.index.slots {
		if e == 0 {
			continue
		}
		r := s.arena.rec(uint32(e))
		tat := r.tat()
		p := s.policyOf(r)
		pn := p.at(n)
		if reported {
			tat = p.without(tat, r.unreported(), pn)
		}
		if tat <= pn {
			continue
		}
		at := len(keys)
		var own bool
		if keys, own = s.ownKeyAt(keys, e); !own {
			continue // a key a caller overwrote: no tag the table keeps
		}
		// The key's length, kept in Key's length until keys stops moving.
		dst = append(dst, Level{Key: keys[at:], Tokens: p.tokens(tat, pn), Quota: p.quota})
	}
	s.mu.Unlock()
	off := keyStart
	for j := first; j < len(dst); j++ {
		l := len(dst[j].Key)
		dst[j].Key = keys[off : off+l : off+l]
		off += l
	}
	return dst, keys
}

// Export calls fn with the levels at now of every tag whose bucket is
// below its burst, shard by shard, each call with the tags of one shard
// (none for an empty one). The slice and the keys are reused for the next
// call: fn must not retain them. Export stops at, and returns, fn's first
// error. Tags that change while Export runs are seen as they are when
// their shard is read.
func (t *Table) Export(now time.Time, fn func([]Level) error) error {
	var levels []Level
	var keys []byte
	for i := range t.shards {
		levels, keys = t.ExportShard(now, i, levels[:0], keys[:0])
		if len(levels) == 0 {
			continue
		}
		if err := fn(levels); err != nil {
			return err
		}
	}
	return nil
}

// Merge lowers each tag's bucket to the level reported for it, as it was
// age before now, and returns how many buckets it lowered. It is
// conservative: a bucket takes the lower of its own level and the one
// reported, refilled at the rate since, so it never gives back a token
// spent since; a report of a fuller bucket changes nothing. Merging the
// same levels twice is the same as merging them once.
//
// Levels are taken in the reported frame (ReportedShard): the table's own
// unreported hits are compared as if not served, then spent again on the
// level taken, since no level from elsewhere can hold them. A table with
// nothing unreported (one read back from its state file on start) takes
// the lower level as it is.
//
// A level is applied under the policy its key matches now, capped at that
// policy's burst, as Reconfigure keeps tokens; keys under an allow or deny
// policy, empty keys, keys longer than the table keeps and levels that are
// not numbers are ignored. Unreported hits are neither read nor changed.
// Merge takes keys as Export returns them and does not retain them.
func (t *Table) Merge(now time.Time, age time.Duration, levels []Level) (lowered int) {
	ns := now.UnixNano()
	maxKey := MaxKeyBytes(int(t.maxTagBytes.Load()))
	for _, lv := range levels {
		if len(lv.Key) == 0 || len(lv.Key) > maxKey || math.IsNaN(lv.Tokens) {
			continue
		}
		var qi int
		var c *compiled
		if lv.Quota.Burst != 0 {
			if lv.Quota.Check() != nil {
				continue
			}
			var err error
			if qi, c, err = t.quotas.intern(lv.Quota, ns, t.usedQuotas); err != nil {
				continue
			}
		}
		h := Hash(t.seed, lv.Key)
		s := &t.shards[h>>t.shift]
		s.mu.Lock()
		if s.merge(s.advance(ns), h, lv.Key, lv.Tokens, int64(age), qi, c) {
			lowered++
		}
		s.mu.Unlock()
	}
	return lowered
}

// merge lowers key's bucket, key hashing to h, to tokens as of age
// nanoseconds before now, and reports whether it did. A level under a
// stated limit c, of policy index qi, gives the tag that limit (unless
// its policy takes none); c is nil for a level under the tag's policy.
func (s *shard) merge(now int64, h uint64, key []byte, tokens float64, age int64, qi int, c *compiled) bool {
	pi := match(s.policies, key)
	p := &s.policies[pi]
	if p.Action != Limit {
		return false
	}
	if c != nil && p.Quotas != QuotaNone {
		p, pi = c, qi
	}
	then := now - min(max(age, 0), maxAhead)
	tat := p.tatAfter(tokens, p.at(then))
	at := p.at(now)
	if tat <= at {
		return false // full again by now
	}
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			return false
		}
	}
	r := s.arena.rec(ref)
	if was := r.policy(); was != pi {
		if c == nil {
			return false // the tag is under a stated limit here: nothing to compare
		}
		// The level's limit applies from now on, as a query stating it.
		p.takeOver(r, s.compiledAt(was), pi, now)
	}
	tat = p.plus(tat, r.unreported(), at)
	for {
		was := r.tat()
		if tat <= was {
			return false
		}
		if r.casTat(was, tat) {
			return true
		}
	}
}

// without is the theoretical arrival time tat less the periods of hits
// served (the whole of them, so never later than the bucket without them
// would be), seen at now.
func (c *compiled) without(tat int64, hits uint32, now int64) int64 {
	if tat <= now || hits == 0 {
		return tat
	}
	hi, back := bits.Mul64(uint64(hits), uint64(c.perToken))
	if hi != 0 || back >= uint64(tat-now) {
		return now
	}
	return tat - int64(back)
}

// plus is tat with hits more spent on it at now, at most maxAhead past
// now, as a peer's hits are.
func (c *compiled) plus(tat int64, hits uint32, now int64) int64 {
	if hits == 0 {
		return tat
	}
	tat = max(tat, now)
	hi, add := bits.Mul64(uint64(hits), uint64(c.perToken))
	if hi != 0 || add > maxAhead || tat-now > maxAhead-int64(add) {
		return now + maxAhead
	}
	return tat + int64(add)
}

// tatAfter is the theoretical arrival time of a bucket that held tokens
// at instant at, capped at the burst and rounded up (a rounding never
// refunds); at most maxAhead past at.
func (c *compiled) tatAfter(tokens float64, at int64) int64 {
	if tokens >= float64(c.Burst) {
		return at
	}
	ahead := math.Ceil((float64(c.Burst) - tokens) * float64(c.perToken))
	if ahead >= float64(maxAhead) {
		return at + maxAhead
	}
	return at + int64(ahead)
}
