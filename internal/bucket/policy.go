package bucket

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
)

// Action says what a policy does with the tags it matches.
type Action uint8

const (
	// Limit throttles the tag with a leaky bucket (the default).
	Limit Action = iota
	// Allow always serves the tag and keeps no state for it.
	Allow
	// Deny always refuses the tag and keeps no state for it.
	Deny
)

// String returns the action's configuration name.
func (a Action) String() string {
	switch a {
	case Limit:
		return "limit"
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("action(%d)", a)
}

// Policy is the limit for the tags that start with Prefix. The zero value is
// not usable: a limiting policy needs Rate > 0 and Burst >= 1.
type Policy struct {
	Name   string  // shown in stats and the admin view
	Prefix string  // tags starting with it match; ignored for the default policy
	Rate   float64 // tokens added per second
	Burst  int     // bucket capacity in tokens
	Action Action
	// DryRun serves what the limit would refuse, keeping the bucket as if
	// limiting, and counts it (PolicyStats.DryRunRefused). Not part of the
	// fingerprint: peers throttle alike whether or not it is set.
	DryRun bool
	// Share is the part of Rate and Burst this node holds while its
	// cluster is split (share.go): 0 or 1 holds them whole. Not part of
	// the fingerprint: peers holding different shares of one policy
	// throttle alike.
	Share float64
	// Quotas says what limits callers may state for the policy's tags
	// (limit.go): any (the zero value), lower than the policy's, or none.
	// Not part of the fingerprint: it governs what callers may ask of
	// this node, not how peers apply hits.
	Quotas QuotaRule
}

// Refill is how long the policy's bucket takes to refill from empty to
// full: burst over rate. It is zero for a policy that keeps no bucket
// (allow, deny, or no rate), and saturates at the longest Duration.
func (p Policy) Refill() time.Duration {
	if p.Action != Limit || !(p.Rate > 0) || p.Burst <= 0 {
		return 0
	}
	ns := float64(p.Burst) / p.Rate * float64(time.Second)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// compiled is a Policy turned into integer nanoseconds, the unit the table
// computes in, so that decisions are exact and never depend on rounding.
type compiled struct {
	Policy
	whole    Policy        // as configured: Rate and Burst before Share scaled them
	counts   *policyCounts // queries answered under this policy's name
	index    *prefixIndex  // set[0] only: the prefixes of the whole set
	perToken int64         // nanoseconds to earn one token (1/rate)
	allowAt  int64         // a query is served while tat-now <= allowAt ((burst-1) tokens)
	debtAt   int64         // tat-now beyond this (burst tokens) means the bucket is below zero
	quota    Quota         // the limit stated, for a quota's (quota.go); zero for a policy
	window   int64         // a window quota's window in nanoseconds (the calendar unit's shortest); 0 for a leaky bucket
}

// maxAhead bounds how far a bucket's theoretical arrival time may run ahead
// of now, so remote hits, however many, never overflow int64.
const maxAhead = math.MaxInt64 / 4

func compile(p Policy) (compiled, error) {
	c := compiled{Policy: p, whole: p}
	if p.Action != Limit {
		return c, nil
	}
	if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
		return c, fmt.Errorf("bucket: policy %q: rate must be > 0, got %v", p.Name, p.Rate)
	}
	if p.Burst < 1 {
		return c, fmt.Errorf("bucket: policy %q: burst must be >= 1, got %d", p.Name, p.Burst)
	}
	p, err := scale(p)
	if err != nil {
		return c, err
	}
	c.Policy = p
	per := math.Round(float64(time.Second) / p.Rate)
	if per < 1 {
		per = 1
	}
	if per*float64(p.Burst) >= maxAhead {
		return c, fmt.Errorf("bucket: policy %q: burst %d at rate %v takes too long to refill", p.Name, p.Burst, p.Rate)
	}
	c.perToken = int64(per)
	c.allowAt = int64(p.Burst-1) * c.perToken
	c.debtAt = int64(p.Burst) * c.perToken
	return c, nil
}

// policyCounts counts the queries a policy answered. Limit policies count
// in their shards, under the shard lock, and fold the counts into ok and
// no when the policies change. Allow and deny policies take no lock: they
// count in stripes, each on a cache line of its own, picked at random per
// query, so that cores answering them rarely write the same line; so do
// dry runs, for the queries their limit would refuse, and charges. Reads
// sum everything.
type policyCounts struct {
	ok, no  atomic.Uint64
	stripes atomic.Pointer[[answerStripes]answerCounts] // nil until first needed
}

// answerStripes is how many stripes an allow or deny policy counts in: a
// few per core of a large machine, 512 bytes per policy.
const answerStripes = 8

// answerCounts is one stripe of an allow or deny policy's counts, and
// of a limit policy's charges.
type answerCounts struct {
	ok, no  atomic.Uint64
	dry     atomic.Uint64 // served by a dry run where the limit would refuse
	charges atomic.Uint64 // charges applied (charge.go)
	charged atomic.Uint64 // the tokens they took
	_       [24]byte      // a cache line each
}

// stripe returns a stripe picked at random.
func (c *policyCounts) stripe() *answerCounts {
	st := c.stripes.Load()
	if st == nil {
		c.stripes.CompareAndSwap(nil, new([answerStripes]answerCounts))
		st = c.stripes.Load()
	}
	return &st[rand.Uint32()%answerStripes] // the runtime's per-thread generator
}

// count counts one fixed answer of an allow or deny policy.
func (c *policyCounts) count(ok bool) {
	s := c.stripe()
	if ok {
		s.ok.Add(1)
	} else {
		s.no.Add(1)
	}
}

// countDry counts a query a dry run served where its limit would refuse
// (besides counting it as served).
func (c *policyCounts) countDry() { c.stripe().dry.Add(1) }

// countCharge counts one charge of n tokens to a limit policy's bucket.
// Charges come once per answered request, far fewer than queries, and
// take no shard count: they count in the stripes.
func (c *policyCounts) countCharge(n uint32) {
	s := c.stripe()
	s.charges.Add(1)
	s.charged.Add(uint64(n))
}

// chargeTotals sums the charges and the tokens they took.
func (c *policyCounts) chargeTotals() (charges, tokens uint64) {
	if st := c.stripes.Load(); st != nil {
		for i := range st {
			charges += st[i].charges.Load()
			tokens += st[i].charged.Load()
		}
	}
	return charges, tokens
}

// totals sums the counts.
func (c *policyCounts) totals() (ok, no, dry uint64) {
	ok, no = c.ok.Load(), c.no.Load()
	if st := c.stripes.Load(); st != nil {
		for i := range st {
			ok += st[i].ok.Load()
			no += st[i].no.Load()
			dry += st[i].dry.Load()
		}
	}
	return ok, no, dry
}

// tatFor is the theoretical arrival time that leaves tokens in the bucket
// at now: now itself for a full bucket.
func (c *compiled) tatFor(tokens float64, now int64) int64 {
	if tokens >= float64(c.Burst) {
		return now
	}
	ahead := (float64(c.Burst) - tokens) * float64(c.perToken)
	if ahead >= maxAhead {
		return now + maxAhead
	}
	return now + int64(math.Round(ahead))
}

// tokens is the bucket level of an entry whose theoretical arrival time is
// tat, seen at now: burst when tat <= now, less (possibly below zero) after.
func (c *compiled) tokens(tat, now int64) float64 {
	if tat <= now {
		return float64(c.Burst)
	}
	return float64(c.Burst) - float64(tat-now)/float64(c.perToken)
}

// policySet holds the default policy at index 0 and the prefix policies
// after it, longest prefix first, so the first match is the longest.
type policySet []compiled

// newPolicySet compiles the policies. Counts are taken over from old by
// policy name, so a reload keeps every policy's totals; old may be nil.
func newPolicySet(def Policy, prefixed []Policy, old policySet) (policySet, error) {
	if len(prefixed) > MaxPolicies {
		return nil, fmt.Errorf("bucket: too many policies (%d)", len(prefixed))
	}
	def.Prefix = ""
	if def.Name == "" {
		def.Name = "default"
	}
	set := make(policySet, 0, len(prefixed)+1)
	c, err := compile(def)
	if err != nil {
		return nil, err
	}
	set = append(set, c)
	seen := map[string]bool{}
	for _, p := range prefixed {
		if p.Prefix == "" {
			return nil, fmt.Errorf("bucket: policy %q: empty prefix", p.Name)
		}
		if seen[p.Prefix] {
			return nil, fmt.Errorf("bucket: policy %q: prefix %q used twice", p.Name, p.Prefix)
		}
		seen[p.Prefix] = true
		if p.Name == "" {
			p.Name = p.Prefix
		}
		c, err := compile(p)
		if err != nil {
			return nil, err
		}
		set = append(set, c)
	}
	// Longest first so the first match is the longest; prefixes are unique,
	// so ordering equal lengths by prefix makes the order total.
	sort.Slice(set[1:], func(i, j int) bool {
		a, b := set[1+i].Prefix, set[1+j].Prefix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	byName := map[string]*policyCounts{}
	for i := range old {
		byName[old[i].Name] = old[i].counts
	}
	for i := range set {
		if set[i].counts = byName[set[i].Name]; set[i].counts == nil {
			set[i].counts = new(policyCounts)
		}
	}
	set[0].index = newPrefixIndex(set)
	return set, nil
}

// match returns the index of the policy for tag: the longest matching
// prefix, or 0 for the default. Its cost depends on the tag, not on the
// number of policies (see prefixIndex).
func match[T string | []byte](s policySet, tag T) int {
	if len(s) == 1 {
		return 0
	}
	return lookup(s[0].index, tag)
}

// fingerprint hashes what the policies do (prefixes, actions, rates and
// bursts, not names), so peers can tell whether they throttle alike. A
// dry run keeps its buckets as if limiting, so it is left out; so is a
// share, which hashes the whole rate and burst.
func (s policySet) fingerprint() uint64 {
	h := fnv.New64a()
	var buf []byte
	for i := range s {
		p := s[i].whole
		buf = strconv.AppendQuote(buf[:0], p.Prefix)
		buf = append(buf, ' ')
		buf = append(buf, p.Action.String()...)
		if p.Action == Limit {
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, p.Rate, 'g', -1, 64)
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(p.Burst), 10)
		}
		buf = append(buf, '\n')
		h.Write(buf)
	}
	return h.Sum64()
}

// PolicyOf returns the policy that governs key now.
func (t *Table) PolicyOf(key string) Policy {
	s := *t.policies.Load()
	return s[match(s, key)].Policy
}

// Policies returns the current policies, the default first.
func (t *Table) Policies() []Policy {
	s := *t.policies.Load()
	out := make([]Policy, len(s))
	for i := range s {
		out[i] = s[i].Policy
	}
	return out
}
