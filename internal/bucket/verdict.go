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
// changes no bucket and is counted as refused (the policy's NO, and the
// tag among who is throttled). It shares Allow's table, policies and
// counters, dry runs included. An empty tag is served, not accounted,
// under no policy. AllowN does not retain tag.
func (t *Table) AllowN(now time.Time, tag []byte, n int) Verdict {
	if len(tag) == 0 {
		return Verdict{Allowed: true}
	}
	n = max(n, 1)
	set := t.policies.Load()
	pi := match(*set, tag)
	if p := &(*set)[pi]; p.Action != Limit {
		p.answer()
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
			s.policies[pi].answer()
			return s.policies[pi].fixed()
		}
	}
	return s.allowN(s.advance(now.UnixNano()), h, tag, pi, n)
}

// AllowNNow is shorthand for AllowN(time.Now(), tag, n).
func (t *Table) AllowNNow(tag []byte, n int) Verdict { return t.AllowN(time.Now(), tag, n) }

// Check is the verdict AllowN would give a query for tag at now costing n
// tokens (n < 1 asks about 1), spending nothing and counting nothing: the
// bucket's level as it is, and whether the cost would be served (under a
// DryRun policy, Allowed with WouldRefuse where the limit would refuse).
// It is for a caller that decides several tags together (the rate limit
// service checks every descriptor of a request before spending any):
// it then spends with AllowN, which decides again and may refuse if the
// bucket was spent meanwhile, or counts its refusal with Refuse. An empty
// tag is served under no policy. Check does not retain tag.
func (t *Table) Check(now time.Time, tag []byte, n int) Verdict {
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
		if pi = match(s.policies, tag); s.policies[pi].Action != Limit {
			return s.policies[pi].fixed()
		}
	}
	p := &s.policies[pi]
	at := max(s.now, now.UnixNano()) // as the next decision will see it; the clock is not moved
	tat := at
	if _, ref := s.index.lookup(&s.arena, h, tag); ref != 0 {
		r := s.arena.rec(ref)
		if r.policy() >= quotaBase {
			c := s.policyOf(r)
			ca := c.at(at)
			v := c.stated(p, c.level(max(r.tat(), ca), ca, n), ca, at)
			if !v.Allowed && p.DryRun {
				v.Allowed, v.WouldRefuse = true, true
			}
			return v
		}
		tat = max(r.tat(), at)
	}
	v := p.level(tat, at, n)
	if !v.Allowed && p.DryRun {
		v.Allowed, v.WouldRefuse = true, true
	}
	return v
}

// Refuse counts a query for tag at now as refused, as AllowN counts one
// it refuses, without deciding it or changing any bucket: for a caller
// that refused it on a Check of its own. Under a policy that refuses
// nothing (allow, or a dry run) it counts nothing. Refuse does not retain
// tag.
func (t *Table) Refuse(now time.Time, tag []byte) {
	if len(tag) == 0 {
		return
	}
	set := t.policies.Load()
	pi := match(*set, tag)
	if p := &(*set)[pi]; p.Action != Limit {
		p.refuse()
		return
	}
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		tag = digestKey(tag, max)
	}
	h := Hash(t.seed, tag)
	s := &t.shards[h>>t.shift]
	s.mu.Lock()
	defer s.mu.Unlock()
	if &s.policies[0] != &(*set)[0] {
		if pi = match(s.policies, tag); s.policies[pi].Action != Limit {
			s.policies[pi].refuse()
			return
		}
	}
	if s.policies[pi].DryRun {
		return
	}
	s.advance(now.UnixNano())
	if _, ref := s.index.lookup(&s.arena, h, tag); ref != 0 {
		s.refusedRec(ref)
	} else {
		s.refused(pi, h, tag, 1)
	}
	s.count(pi).no++
}

// refuse counts a refusal under an allow or deny policy: a deny policy's
// that is not a dry run; the others refuse nothing.
func (c *compiled) refuse() {
	if c.Action == Deny && !c.DryRun {
		c.counts.count(false)
	}
}

// fixed is the verdict of an allow or deny policy, not counted.
func (c *compiled) fixed() Verdict {
	return Verdict{Allowed: c.Action == Allow || c.DryRun, WouldRefuse: c.Action == Deny && c.DryRun, Policy: c.Policy}
}

// level is the one verdict of a limit policy's bucket: the bucket whose
// theoretical arrival time is tat (at least now) holds Tokens, is full
// again in Full, and serves a query of n tokens (1 <= n) when
// tat-now <= (burst-n) periods, else in Wait; never when n exceeds the
// burst. It spends and counts nothing.
func (c *compiled) level(tat, now int64, n int) Verdict {
	v := Verdict{Policy: c.Policy}
	if n > c.Burst {
		c.levelAt(&v, tat, now, 0)
		v.Allowed, v.Wait = false, math.MaxInt64
		return v
	}
	c.levelAt(&v, tat, now, c.debtAt-int64(n)*c.perToken) // n <= burst: at most debtAt, no overflow
	return v
}

// levelAt sets v's level at now of a bucket whose theoretical arrival
// time is tat, for a query served while tat-now <= serveBy: its tokens,
// the wait (Allowed when none) and the time until full.
func (c *compiled) levelAt(v *Verdict, tat, now, serveBy int64) {
	v.Tokens, v.Full = c.tokens(tat, now), time.Duration(tat-now)
	v.Wait, v.Allowed = time.Duration(max(tat-now-serveBy, 0)), tat-now <= serveBy
}

// allowN decides a query costing n tokens for key, which hashes to h,
// under limit policy pi at now: served while the bucket holds n tokens
// (level), when it takes them.
func (s *shard) allowN(now int64, h uint64, key []byte, pi int, n int) Verdict {
	p := &s.policies[pi]
	if n > p.Burst {
		// Never served: refuse without tracking the tag.
		tat := now
		if _, ref := s.index.lookup(&s.arena, h, key); ref != 0 {
			tat = max(s.arena.rec(ref).tat(), now)
		}
		s.refused(pi, h, key, 1)
		return s.refusal(pi, p.level(tat, now, n))
	}
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, pi); ref == 0 {
			s.count(pi).ok++ // no room to track it: a full bucket serves
			return Verdict{Allowed: true, Policy: p.Policy, Tokens: float64(p.Burst - n)}
		}
	}
	r := s.arena.rec(ref)
	if r.policy() >= quotaBase {
		// Under a limit a caller stated: it applies to every query.
		c := s.policyOf(r)
		return s.allowQuota(now, h, key, pi, r.policy(), c, Request{Quota: c.quota, Hits: n})
	}
	cost := int64(n) * p.perToken // n <= burst: at most debtAt, no overflow
	serveBy := p.debtAt - cost    // served while tat-now <= serveBy
	var tat int64
	for {
		tat0 := r.tat()
		if tat = max(tat0, now); tat-now > serveBy || r.casTat(tat0, tat+cost) {
			break
		}
	}
	v := Verdict{Policy: p.Policy}
	if tat-now > serveBy {
		s.refusedRec(ref)
		p.levelAt(&v, tat, now, serveBy)
		return s.refusal(pi, v)
	}
	s.count(pi).ok++
	s.unreported(r, ref, uint32(n))
	p.levelAt(&v, tat+cost, now, serveBy) // the level it leaves, and the wait for the same query again
	v.Allowed = true
	return v
}

// refusal counts the refusal v of policy pi's limit and returns it: under
// a dry run, served.
func (s *shard) refusal(pi int, v Verdict) Verdict {
	if s.policies[pi].DryRun {
		v.Allowed, v.WouldRefuse = s.dryRun(pi), true
		return v
	}
	s.count(pi).no++
	return v
}

// dryRun serves a query that dry-run policy pi's limit refuses, changing
// no bucket: it counts the query as served, and as refused by a dry run.
func (s *shard) dryRun(pi int) bool {
	s.count(pi).ok++
	s.policies[pi].counts.countDry()
	return true
}
