package bucket

import (
	"math"
	"strconv"
	"time"
)

// This file owns the decisions under a limit a caller states (limit.go):
// AllowQuota, and a peer's hits reported with the limit they were served
// under. A tag's record keeps the limit it was last decided under; every
// other way of asking about the tag (a line query, a charge, a peer's
// plain hits) then applies that limit too.

// AllowQuota decides a query for tag at now under the limit r states in
// place of its policy's: as AllowN does under a policy, r.Hits tokens
// taken when the bucket holds them, counted as unreported hits for the
// peers (who then apply them under the same limit), a refusal counted
// under the tag's policy. The tag keeps the limit from then on, and a
// query stating another limit changes it at once, keeping the tokens
// spent (capped at the new burst). r.Hits 0 reads the bucket, spending
// and counting nothing; r.Reset refills it first; r.Drain makes a
// refusal take what is left. The verdict's Policy is the tag's policy
// with the limit applied as its Rate and Burst.
//
// Under an allow or deny policy the policy answers, as for AllowN. The
// errors: a *LimitError for a limit out of range, ErrLimitForbidden
// under a policy whose Quotas is QuotaNone, ErrTooManyLimits when the
// table holds MaxQuotas other limits in use; nothing is decided then.
// AllowQuota does not retain tag.
func (t *Table) AllowQuota(now time.Time, tag []byte, r Request) (Verdict, error) {
	if len(tag) == 0 {
		return Verdict{Allowed: true}, nil
	}
	if err := r.Quota.Check(); err != nil {
		return Verdict{}, err
	}
	if r.Hits < 0 {
		return Verdict{}, &LimitError{Field: "hits", Value: strconv.Itoa(r.Hits), Want: "at least 0"}
	}
	set := t.policies.Load()
	pi := match(*set, tag)
	p := &(*set)[pi]
	if p.Action != Limit {
		if r.Hits == 0 {
			return p.fixed(), nil
		}
		p.answer()
		return p.fixed(), nil
	}
	q := r.Quota
	switch p.Quotas {
	case QuotaNone:
		return Verdict{}, ErrLimitForbidden
	case QuotaLower:
		q = q.lower(&p.whole)
	}
	ns := now.UnixNano()
	qi, c, err := t.quotas.intern(q, ns, t.usedQuotas)
	if err != nil {
		return Verdict{}, err
	}
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		tag = digestKey(tag, max)
	}
	h := Hash(t.seed, tag)
	s := &t.shards[h>>t.shift]
	s.mu.Lock()
	defer s.mu.Unlock()
	if &s.policies[0] != &(*set)[0] {
		// A reload swapped the policies in between: the shard's govern.
		if pi = match(s.policies, tag); s.policies[pi].Action != Limit {
			return s.policies[pi].fixed(), nil
		}
	}
	return s.allowQuota(s.advance(ns), h, tag, pi, qi, c, r), nil
}

// AllowQuotaNow is shorthand for AllowQuota(time.Now(), tag, r).
func (t *Table) AllowQuotaNow(tag []byte, r Request) (Verdict, error) {
	return t.AllowQuota(time.Now(), tag, r)
}

// allowQuota decides r for key, which hashes to h, under limit policy pi
// with the stated limit c, whose policy index is qi, at now.
func (s *shard) allowQuota(now int64, h uint64, key []byte, pi, qi int, c *compiled, r Request) Verdict {
	gov := &s.policies[pi]
	at := c.at(now)
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 && (r.Hits == 0 || r.Hits > c.Burst && !r.Drain) {
		// Nothing to keep: a full bucket answers.
		v := c.stated(gov, c.level(at, at, max(r.Hits, r.Need, 1)), at, now)
		if r.Hits > 0 {
			s.refused(pi, h, key, 1)
			return s.refusal(pi, v)
		}
		return v
	}
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, qi); ref == 0 {
			s.count(pi).ok++ // no room to track it: a full bucket serves
			return c.stated(gov, Verdict{Allowed: true, Tokens: float64(c.Burst - r.Hits)}, at, now)
		}
	}
	rec := s.arena.rec(ref)
	if was := rec.policy(); was != qi {
		old := s.compiledAt(was)
		if r.Hits == 0 && !r.Reset {
			// A read changes nothing: the bucket as the new limit would
			// hold it.
			return c.stated(gov, c.level(max(c.spentTat(old, rec.tat(), now), at), at, max(r.Need, 1)), at, now)
		}
		// Another limit, or the policy's: the new one applies at once,
		// with the tokens spent under the old one.
		c.takeOver(rec, old, qi, now)
	}
	if r.Reset {
		casPlus(rec, func(int64) int64 { return at })
	}
	if r.Hits == 0 {
		return c.stated(gov, c.level(max(rec.tat(), at), at, max(r.Need, 1)), at, now)
	}
	n := r.Hits
	if n > c.Burst {
		// Never served; drained as any refusal is, if asked.
		if r.Drain && !gov.DryRun {
			s.drainQuota(rec, ref, c, at)
		}
		v := c.stated(gov, c.level(max(rec.tat(), at), at, n), at, now)
		s.refusedRec(ref)
		return s.refusal(pi, v)
	}
	cost := int64(n) * c.perToken // n <= burst: at most debtAt, no overflow
	serveBy := c.debtAt - cost
	var tat int64
	for {
		tat0 := rec.tat()
		if tat = max(tat0, at); tat-at > serveBy || rec.casTat(tat0, tat+cost) {
			break
		}
	}
	v := Verdict{}
	if tat-at > serveBy {
		if r.Drain && !gov.DryRun {
			s.drainQuota(rec, ref, c, at)
			tat = max(rec.tat(), at)
		}
		s.refusedRec(ref)
		c.levelAt(&v, tat, at, serveBy)
		return s.refusal(pi, c.stated(gov, v, at, now))
	}
	s.count(pi).ok++
	s.unreported(rec, ref, uint32(n))
	c.levelAt(&v, tat+cost, at, serveBy)
	v.Allowed = true
	return c.stated(gov, v, at, now)
}

// drainQuota takes the whole tokens bucket rec still holds at at, as
// hits to report (DRAIN_OVER_LIMIT), so that it holds none.
func (s *shard) drainQuota(rec record, ref uint32, c *compiled, at int64) {
	for {
		tat0 := rec.tat()
		tat := max(tat0, at)
		left := (c.debtAt - (tat - at)) / c.perToken
		if left <= 0 {
			return
		}
		if rec.casTat(tat0, tat+left*c.perToken) {
			s.unreported(rec, ref, uint32(min(left, math.MaxUint32)))
			return
		}
	}
}

// stated turns v, a verdict c's bucket gave at its instant at, into the
// verdict of a query at now under policy gov with c's limit: gov's name
// with c's rate and burst; for a window, the waits run to the start of
// the window that serves, and Full to the start of the first window
// that starts full.
func (c *compiled) stated(gov *compiled, v Verdict, at, now int64) Verdict {
	v.Policy = gov.Policy
	v.Policy.Rate, v.Policy.Burst = c.Rate, c.Burst
	if c.window == 0 {
		return v
	}
	tat := at + int64(v.Full) // the bucket's theoretical arrival time
	if v.Full > 0 {
		v.Full = time.Duration(c.nextWindow(tat) - now)
	}
	if v.Wait > 0 && v.Wait < math.MaxInt64 {
		v.Wait = time.Duration(c.nextWindow(at+int64(v.Wait)) - now)
	}
	return v
}

// spendQuota subtracts hits a peer served for key, which hashes to h,
// under the stated limit c, whose policy index is qi, at now: the tag
// takes the limit, as it does from a query stating it.
func (s *shard) spendQuota(now int64, h uint64, key []byte, hits uint32, qi int, c *compiled) {
	pi := match(s.policies, key)
	if p := &s.policies[pi]; p.Action != Limit || p.Quotas == QuotaNone {
		s.spend(now, h, key, hits)
		return
	}
	pos, ref := s.index.lookup(&s.arena, h, key)
	if ref == 0 {
		if ref = s.insert(now, h, pos, key, qi); ref == 0 {
			return
		}
	}
	rec := s.arena.rec(ref)
	at := c.at(now)
	if was := rec.policy(); was != qi {
		c.takeOver(rec, s.compiledAt(was), qi, now)
	}
	casPlus(rec, func(tat int64) int64 { return c.plus(tat, hits, at) })
}

// takeOver puts record rec, under old until now, under the stated limit
// c of policy index qi: the tokens spent stay spent, so that a higher
// limit serves its difference at once and a lower one may leave the
// bucket empty, or in debt (Gubernator applies a changed limit so).
func (c *compiled) takeOver(rec record, old *compiled, qi int, now int64) {
	rec.setPolicy(qi)
	casPlus(rec, func(tat int64) int64 { return c.spentTat(old, tat, now) })
}

// spentTat is the tat under c of a bucket whose tat under old is tat,
// at now: the tokens spent under old spent under c.
func (c *compiled) spentTat(old *compiled, tat, now int64) int64 {
	return c.tatFor(float64(c.Burst)-(float64(old.Burst)-old.tokens(tat, old.at(now))), c.at(now))
}
