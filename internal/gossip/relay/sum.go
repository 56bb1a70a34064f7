// Package relay is relaying (docs/scaling.md). Its two ledgers, plain
// data structures on an injected clock that the simulator runs too, are
// what a relay sums per tag before it passes it on (Sum) and what a node
// sent to a relay and has not yet seen come back (OwnHits), with the
// hold-back of a policy (HoldFor) and the relay a tag's hits go to
// (Pick). A node's part in relaying, which sends its reports to relays,
// sums and passes on what it gets when it is one, and applies their
// aggregates, is Part (part.go), which a gossip node is given.
package relay

import (
	"cmp"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// Hit is a tag's key and a count of hits, as reports carry them.
type Hit = wire.Hit

// MaxLedger bounds each relay ledger's tags (a relay's held sums, the
// hits from other segments, a node's own hits not yet come back), however
// many tags arrive: past it, a relay passes a new tag on unheld, and a
// node keeps no record of it (its own hits then come back and are
// counted twice, which refuses early, never late).
const MaxLedger = 1 << 20

// HoldFunc gives a tag's hold-back threshold, in hits, and its hold age:
// a relay holds a tag's sum until it reaches the threshold, and drops it
// if it has not within the age. A threshold of 1 holds nothing back.
type HoldFunc func(key string) (threshold uint32, age time.Duration)

// MaxHoldAge bounds a hold age: a relay holds no sum longer than this,
// however slowly a policy refills.
const MaxHoldAge = time.Hour

// HoldFor is the hold-back of a policy of burst tokens whose bucket
// refills in refill (bucket.Policy.Refill): a threshold of ceil(fraction *
// burst) hits, at least 1, and an age of refill rounded up to whole
// intervals, at most MaxHoldAge (or one interval, if that is longer).
func HoldFor(fraction float64, burst int, refill, interval time.Duration) (threshold uint32, age time.Duration) {
	t := uint32(1)
	if v := fraction * float64(burst); v > 1 {
		t = uint32(v)
		if float64(t) < v-1e-9 {
			t++
		}
	}
	a := min(refill, MaxHoldAge)
	return t, max(interval, min(MaxHoldAge, (a+interval-1)/interval*interval))
}

// Sum is what a relay keeps between aggregates: per tag, the hits
// its nodes reported that it has not passed on, and the tags that are
// hot. A tag whose sum reaches its threshold in one aggregate is passed
// on and is hot for HotAges times its hold age after (renewed while each
// aggregate carries at least the threshold's worth of the hold age, half
// the tag's rate at the defaults): a hot tag is passed on at every
// aggregate, however few its hits, so the tags near their limit are known
// as promptly as without holding. A sum that stays under its threshold
// for its hold age is dropped: a client that sparse is far from its limit.
//
// Its zero value is not usable: see NewSum. Not safe for concurrent
// use.
type Sum struct {
	hold     HoldFunc
	hotAges  int
	every    time.Duration
	held     map[string]*heldSum
	hot      map[string]time.Time // until when a tag is hot
	overflow []Hit                // passed on unheld: the sums were full
	stats    Stats
}

type heldSum struct {
	count uint32
	since time.Time
}

// Stats are a Sum's counters over its life, and what it holds.
type Stats struct {
	HeldTags    int    // tags with a sum held now
	HeldHits    uint64 // hits held now
	HotTags     int    // tags hot now
	Added       uint64 // hits added
	Passed      uint64 // hits passed on
	Dropped     uint64 // hits dropped as too sparse to matter
	DroppedTags uint64 // sums dropped
	Overflow    uint64 // hits passed on unheld because the sums were full
}

// NewSum returns an empty sum for a relay that sends an aggregate
// every interval. hotAges is at least 1.
func NewSum(hold HoldFunc, hotAges int, every time.Duration) *Sum {
	return &Sum{hold: hold, hotAges: max(1, hotAges), every: every,
		held: map[string]*heldSum{}, hot: map[string]time.Time{}}
}

// Add sums hits a node reported at now. It does not retain hits, but it
// keeps their keys.
func (r *Sum) Add(now time.Time, hits []Hit) {
	for _, h := range hits {
		if h.Key == "" || h.Count == 0 {
			continue
		}
		e := r.held[h.Key]
		if e == nil {
			e = &heldSum{since: now}
			r.held[h.Key] = e
		}
		e.count += h.Count
		r.stats.Added += uint64(h.Count)
		r.stats.HeldHits += uint64(h.Count)
	}
}

// Flush appends to dst, ordered by key, the sums to pass on at now: those
// of hot tags and those that reached their threshold. It drops the sums
// that stayed under their threshold for their hold age, and keeps the
// rest.
func (r *Sum) Flush(now time.Time, dst []Hit) []Hit {
	for key, until := range r.hot {
		if !now.Before(until) {
			delete(r.hot, key)
		}
	}
	first := len(dst)
	for _, h := range r.overflow {
		dst = append(dst, h)
		r.stats.Passed += uint64(h.Count)
	}
	r.overflow = r.overflow[:0]
	for key, e := range r.held {
		theta, age := r.hold(key)
		_, hot := r.hot[key]
		switch {
		case hot || e.count >= theta:
			dst = append(dst, Hit{Key: key, Count: e.count})
			delete(r.held, key)
			r.stats.Passed += uint64(e.count)
			r.stats.HeldHits -= uint64(e.count)
			keep := e.count >= theta || hot && e.count >= keepHot(theta, age, r.every)
			if keep && (hot || len(r.hot) < MaxLedger) {
				r.hot[key] = now.Add(time.Duration(r.hotAges) * age)
			}
		case now.Sub(e.since) >= age:
			delete(r.held, key)
			r.stats.Dropped += uint64(e.count)
			r.stats.DroppedTags++
			r.stats.HeldHits -= uint64(e.count)
		}
	}
	slices.SortFunc(dst[first:], func(a, b Hit) int { return cmp.Compare(a.Key, b.Key) })
	return dst
}

// FlushAll appends to dst every sum held, whatever its threshold, and
// empties the sums: a relay's last aggregate before it stops.
func (r *Sum) FlushAll(dst []Hit) []Hit {
	for _, h := range r.overflow {
		dst = append(dst, h)
		r.stats.Passed += uint64(h.Count)
	}
	r.overflow = r.overflow[:0]
	for key, e := range r.held {
		dst = append(dst, Hit{Key: key, Count: e.count})
		r.stats.Passed += uint64(e.count)
	}
	r.stats.HeldHits = 0
	clear(r.held)
	return dst
}

// keepHot is what a hot tag must sum in one aggregate to stay hot: the
// threshold's worth over the hold age, at least 1.
func keepHot(theta uint32, age, every time.Duration) uint32 {
	k := float64(theta) * every.Seconds() / age.Seconds()
	n := uint32(k)
	if float64(n) < k-1e-9 {
		n++
	}
	return max(1, n)
}

// SetHold changes the hold-back and the time between aggregates, from the
// next Add and Flush on: a reload's.
func (r *Sum) SetHold(hold HoldFunc, every time.Duration) { r.hold, r.every = hold, every }

// Stats returns the counters and what the sum holds now.
func (r *Sum) Stats() Stats {
	st := r.stats
	st.HeldTags, st.HotTags = len(r.held), len(r.hot)
	return st
}

// OwnHits is a node's ledger of the hits it sent to relays and has not
// yet seen come back: a relay's aggregate includes the receiver's own
// hits, which its table already counts, so the node takes them off before
// it applies the aggregate. A tag's hits are taken off the first
// aggregate that carries the tag (if that aggregate was sent before they
// reached the relay, they are known one delivery later, and the next
// aggregate is applied in full); hits not seen back within the forget
// time (the relay dropped them, or they were lost) are forgotten.
//
// Its zero value is not usable: see NewOwnHits. Not safe for concurrent
// use.
type OwnHits struct {
	forget time.Duration
	m      map[string]*ownEntry
}

type ownEntry struct {
	count uint32
	at    time.Time // last sent
}

// NewOwnHits returns an empty ledger that forgets hits not seen back
// within forget of their last sending.
func NewOwnHits(forget time.Duration) *OwnHits {
	return &OwnHits{forget: forget, m: map[string]*ownEntry{}}
}

// Sent records hits sent to a relay at now. It keeps their keys.
func (o *OwnHits) Sent(now time.Time, hits []Hit) {
	for _, h := range hits {
		if h.Key == "" || h.Count == 0 {
			continue
		}
		e := o.m[h.Key]
		if e == nil {
			e = &ownEntry{}
			o.m[h.Key] = e
		}
		e.count += h.Count
		e.at = now
	}
}

// Others appends to dst the hits of an aggregate less this node's own,
// and takes those off the ledger. Entries left with no hits are dropped.
func (o *OwnHits) Others(agg []Hit, dst []Hit) []Hit {
	dst, _ = o.Split(agg, dst, nil)
	return dst
}

// Split is Others that also appends to back the node's own hits the
// aggregate carried: those its peers know of from now on.
func (o *OwnHits) Split(agg []Hit, others, back []Hit) ([]Hit, []Hit) {
	for _, h := range agg {
		c := h.Count
		if e := o.m[h.Key]; e != nil {
			sub := min(c, e.count)
			c -= sub
			if e.count -= sub; e.count == 0 {
				delete(o.m, h.Key)
			}
			if sub > 0 {
				back = append(back, Hit{Key: h.Key, Count: sub})
			}
		}
		if c > 0 {
			others = append(others, Hit{Key: h.Key, Count: c})
		}
	}
	return others, back
}

// Pending moves each level by the node's own hits of its tag not yet
// come back, by sign: +1 gives them back (a level for a peer, which knows
// nothing of them), -1 spends them (a peer's level, merged here).
func (o *OwnHits) Pending(levels []wire.Level, sign float64) {
	if len(o.m) == 0 {
		return
	}
	for i := range levels {
		if e := o.m[string(levels[i].Key)]; e != nil {
			levels[i].Tokens += sign * float64(e.count)
		}
	}
}

// Forget drops the entries last sent more than the forget time before
// now, and reports how many hits they held.
func (o *OwnHits) Forget(now time.Time) (hits uint64) {
	for key, e := range o.m {
		if now.Sub(e.at) > o.forget {
			hits += uint64(e.count)
			delete(o.m, key)
		}
	}
	return hits
}

// SetForget changes the forget time of hits not seen back.
func (o *OwnHits) SetForget(d time.Duration) { o.forget = d }

// Len is how many tags the ledger holds.
func (o *OwnHits) Len() int { return len(o.m) }

// Pick returns which of n relays a tag's hits go to: FNV-1a of the
// key modulo n, the same on every node. n must be at least 1.
func Pick(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// AddCapped is Add, but a tag new to a sum that holds MaxLedger tags
// already is passed on at the next aggregate instead of held.
func (r *Sum) AddCapped(now time.Time, hits []Hit) {
	if len(r.held) < MaxLedger {
		r.Add(now, hits)
		return
	}
	for _, h := range hits {
		if _, ok := r.held[h.Key]; ok {
			r.Add(now, []Hit{h})
		} else if h.Key != "" && h.Count > 0 {
			r.stats.Added += uint64(h.Count)
			r.stats.Overflow += uint64(h.Count)
			r.overflow = append(r.overflow, h)
		}
	}
}

// SentCapped is Sent, but records no tag new to a ledger that holds
// MaxLedger tags already.
func (o *OwnHits) SentCapped(now time.Time, hits []Hit) {
	if len(o.m) < MaxLedger {
		o.Sent(now, hits)
		return
	}
	for _, h := range hits {
		if _, ok := o.m[h.Key]; ok {
			o.Sent(now, []Hit{h})
		}
	}
}
