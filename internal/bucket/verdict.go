package bucket

import (
	"math"
	"time"
)

// Verdict is the answer to one query with the bucket behind it, for
// callers that tell their clients more than yes or no (the HTTP decision
// endpoint's RateLimit headers). The zero Verdict is a refusal under an
// unnamed policy.
type Verdict struct {
	// Allowed reports whether the query is served. Under a DryRun policy
	// it is always true; WouldRefuse then says what the limit decided.
	Allowed     bool
	WouldRefuse bool
	// Policy is the policy the tag fell under; the zero Policy for an
	// empty tag, which is served without one.
	Policy Policy
	// Tokens is the bucket's level after the query, possibly below zero
	// (debt from peers' hits). Meaningful for limit policies only.
	Tokens float64
	// Wait is how long until the same query would be served: zero when
	// the bucket still holds its cost, the largest Duration when the cost
	// exceeds the policy's burst and never will be.
	Wait time.Duration
	// Full is how long until the bucket is full again, when its tag is
	// as good as new.
	Full time.Duration
}

// AllowN decides a query for tag at now that costs n tokens (n < 1 costs
// 1), as Allow does for one token: a served query takes n tokens and
// counts n unreported hits, for the peers to subtract; a refused one
// changes nothing. It shares Allow's table, policies and counters, dry
// runs included. An empty tag is served, not accounted, under no policy.
// AllowN does not retain tag.
func (t *Table) AllowN(now time.Time, tag []byte, n int) Verdict {
	if len(tag) == 0 {
		return Verdict{Allowed: true}
	}
	n = max(n, 1)
	set := t.policies.Load()
	pi := match(*set, tag)
	if p := &(*set)[pi]; p.Action != Limit {
		return p.fixed()
	}
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		tag = digestKey(tag, max)
	}
	h := Hash(t.seed, tag)
	s := &t.shards[h>>t.shift]
	s.mu.Lock()
	defer s.mu.Unlock()
	if &s.policies[0] != &(*set)[0] {
		// A reload swapped the policies in between: ask the shard's.
		if pi = match(s.policies, tag); s.policies[pi].Action != Limit {
			return s.policies[pi].fixed()
		}
	}
	return s.allowN(s.advance(now.UnixNano()), h, tag, pi, n)
}

// fixed is the verdict of an allow or deny policy, counted.
func (c *compiled) fixed() Verdict {
	return Verdict{Allowed: c.answer(), WouldRefuse: c.Action == Deny && c.DryRun, Policy: c.Policy}
}

// AllowNNow is shorthand for AllowN(time.Now(), tag, n).
func (t *Table) AllowNNow(tag []byte, n int) Verdict { return t.AllowN(time.Now(), tag, n) }

// allowN decides a query costing n tokens for key, which hashes to h,
// under limit policy pi at now. It is the shard's allow generalised: a
// query is served while the bucket holds n tokens, that is while tat-now
// <= (burst-n) periods.
func (s *shard) allowN(now int64, h uint64, key []byte, pi int, n int) Verdict {
	p := &s.policies[pi]
	if n > p.Burst {
		// Never served: refuse without tracking the tag.
		s.refused(pi, h, key, 1)
		v := Verdict{Policy: p.Policy, Tokens: float64(p.Burst), Wait: math.MaxInt64}
		if _, ref := s.index.lookup(&s.arena, h, key); ref != 0 {
			tat := max(s.arena.rec(ref).tat(), now)
			v.Tokens, v.Full = p.tokens(tat, now), time.Duration(tat-now)
		}
		if p.DryRun {
			v.Allowed, v.WouldRefuse = s.dryRun(pi), true
			return v
		}
		s.count(pi).no++
		return v
	}
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			s.count(pi).ok++ // no room to track it: a full bucket serves
			return Verdict{Allowed: true, Policy: p.Policy, Tokens: float64(p.Burst - n)}
		}
	}
	r := s.arena.rec(ref)
	cost := int64(n) * p.perToken // n <= burst: at most debtAt, no overflow
	serveBy := p.debtAt - cost    // served while tat-now <= serveBy
	var tat int64
	for {
		tat0 := r.tat()
		if tat = max(tat0, now); tat-now > serveBy || r.casTat(tat0, tat+cost) {
			break
		}
	}
	if tat-now > serveBy {
		s.refusedRec(ref)
		v := Verdict{Policy: p.Policy, Tokens: p.tokens(tat, now),
			Wait: time.Duration(tat - now - serveBy), Full: time.Duration(tat - now)}
		if p.DryRun {
			v.Allowed, v.WouldRefuse = s.dryRun(pi), true
			return v
		}
		s.count(pi).no++
		return v
	}
	s.count(pi).ok++
	tat += cost
	s.unreported(r, ref, uint32(n))
	return Verdict{Allowed: true, Policy: p.Policy, Tokens: p.tokens(tat, now),
		Wait: time.Duration(max(tat-now-serveBy, 0)), Full: time.Duration(tat - now)}
}

// dryRun serves a query that dry-run policy pi's limit refuses, changing
// no bucket: it counts the query as served, and as refused by a dry run.
func (s *shard) dryRun(pi int) bool {
	s.count(pi).ok++
	s.policies[pi].counts.countDry()
	return true
}
