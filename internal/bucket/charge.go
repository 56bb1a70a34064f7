package bucket

import (
	"math"
	"time"
)

// Charge takes n tokens from tag's bucket at now, whatever the bucket
// holds: a cost known only once a request has been answered (the tokens
// a language model generated, the rows a query read) is paid after the
// fact, into debt if need be, exactly as a peer's report of n hits is
// (docs/design.md, Semantics). A charge is never refused and answers
// nothing: the next queries for the tag are refused until the bucket has
// refilled past the debt. The n tokens count as n unreported hits, so the
// next report carries them to the peers like any other. However large n
// and however slow the rate, the bucket's time stays in range: a charge
// saturates, as a peer's report does, and so does the unreported count.
//
// A charge of 0 tokens, or for an empty tag, does nothing; so does one
// for a tag under an allow or deny policy, which has no bucket. A tag
// longer than MaxTagBytes is keyed by its digest, as Allow keys it. A
// dry-run policy's bucket is charged as any other. Charges and their
// tokens are counted per policy (PolicyStats.Charges and ChargedTokens),
// not as queries. Charge does not retain tag.
func (t *Table) Charge(now time.Time, tag []byte, n uint32) {
	if len(tag) == 0 || n == 0 {
		return
	}
	set := t.policies.Load()
	pi := match(*set, tag)
	if (*set)[pi].Action != Limit {
		return
	}
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		tag = digestKey(tag, max)
	}
	h := Hash(t.seed, tag)
	s := &t.shards[h>>t.shift]
	s.mu.Lock()
	if &s.policies[0] != &(*set)[0] {
		// A reload swapped the policies in between: charge under the
		// shard's.
		if pi = match(s.policies, tag); s.policies[pi].Action != Limit {
			s.mu.Unlock()
			return
		}
	}
	s.charge(s.advance(now.UnixNano()), h, tag, pi, n)
	s.mu.Unlock()
}

// ChargeNow is shorthand for Charge(time.Now(), tag, n).
func (t *Table) ChargeNow(tag []byte, n uint32) { t.Charge(time.Now(), tag, n) }

// charge takes n tokens from the bucket of key, which hashes to h, under
// limit policy pi at now, whatever it holds, and counts them as hits to
// report.
func (s *shard) charge(now int64, h uint64, key []byte, pi int, n uint32) {
	p := &s.policies[pi]
	p.counts.countCharge(n)
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			return
		}
	}
	r := s.arena.rec(ref)
	if r.policy() >= quotaBase {
		p = s.policyOf(r) // under a limit a caller stated
		now = p.at(now)
	}
	casPlus(r, func(tat int64) int64 { return p.plus(tat, n, now) })
	s.unreported(r, ref, n)
	// Drain caps a record's hits at what its policy could serve: a
	// charge may go past that, so it is noted here.
	if s.charged == nil {
		s.charged = make(map[uint32]uint32)
	}
	s.charged[ref] = uint32(min(uint64(s.charged[ref])+uint64(n), math.MaxUint32))
}
