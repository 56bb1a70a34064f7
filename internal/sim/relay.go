package sim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
)

// relay is the relay designs: the first Relays nodes of the segment are
// its relays as well as ordinary nodes. Every node sends each tag's hits
// to one relay, chosen by the tag among the relays it hears (so each relay
// sums a share of the tags); each relay sums what it gets per tag and, at
// its own report time, sends one aggregate to every node. The aggregate
// includes the receiver's own hits: each node remembers what it sent to
// the relays and not yet seen come back, and subtracts it. A node that
// hears no relay for the silence timeout sends its hits directly to every
// node, as today. With hold set, a relay holds a tag's sum until it
// reaches the threshold, and drops it if it has not within the hold age;
// a tag that reached the threshold is hot for Config.HotAges hold ages after
// (longer while it keeps up half its rate), and its sum is sent at every report
// time, however small, so that the tags near their limit are known as
// promptly as without holding.
type relay struct {
	s     *sim
	hold  bool
	theta uint32
	// keepHot is what a hot tag must sum at each report time to stay hot:
	// the threshold's worth over the hold age (half the rate).
	keepHot uint32
	age     time.Duration
	relays  []int // node index of each relay
	failed  bool

	agg   []map[string]*held     // per relay: hits summed and not yet sent
	hot   []map[string]time.Time // per relay: tags that reached the threshold, until when they stay hot
	own   []map[string]*owned    // per node: hits sent to a relay and not yet come back
	heard [][]time.Time          // per node, per relay: when its last aggregate arrived

	silentAfter time.Duration
	forget      time.Duration // when a node stops waiting for its own hits to come back
	byRelay     [][]bucket.Hit
	live        []int
	out, mine   []bucket.Hit

	Dropped uint64 // held hits a relay dropped
}

// owned is what a node sent to the relays for one tag and has not seen
// come back in an aggregate yet.
type owned struct {
	count uint32
	at    time.Time // last sent
}

func newRelay(s *sim, hold bool) design {
	n := min(s.cfg.Relays, len(s.nodes))
	r := &relay{s: s, hold: hold, theta: s.cfg.threshold(), age: s.cfg.holdAge(),
		agg: make([]map[string]*held, n), hot: make([]map[string]time.Time, n), own: make([]map[string]*owned, len(s.nodes)),
		heard: make([][]time.Time, len(s.nodes)), byRelay: make([][]bucket.Hit, n),
		silentAfter: max(3*s.cfg.Interval, s.cfg.Interval+time.Second)}
	r.keepHot = uint32(max(1, math.Ceil(float64(r.theta)*s.cfg.RelayEvery.Seconds()/r.age.Seconds())))
	r.forget = 2*s.cfg.Interval + 4*s.cfg.Step
	if hold {
		r.forget += r.age
	}
	for k := range n {
		r.relays = append(r.relays, k)
		r.agg[k] = map[string]*held{}
		r.hot[k] = map[string]time.Time{}
	}
	for i := range s.nodes {
		r.own[i] = map[string]*owned{}
		r.heard[i] = make([]time.Time, n)
		for k := range n {
			r.heard[i][k] = s.t0 // relays are taken to be there at the start
		}
	}
	return r
}

// relayOf returns the relay index of node i, or -1.
func (r *relay) relayOf(i int) int {
	if i < len(r.relays) {
		return i
	}
	return -1
}

func (r *relay) fail() { r.failed = true }

func (r *relay) report(i int, now time.Time) {
	hits := r.s.drain(i)
	self := r.relayOf(i)
	r.live = r.live[:0]
	for k := range r.relays {
		if k == self && !r.failed || k != self && now.Sub(r.heard[i][k]) <= r.silentAfter {
			r.live = append(r.live, k)
		}
	}
	own := r.own[i]
	for key, o := range own {
		if now.Sub(o.at) > r.forget {
			delete(own, key)
		}
	}
	if len(r.live) == 0 {
		r.s.send(i, -1, kindReport, hits) // no relay heard: directly, as today
		return
	}
	for k := range r.byRelay {
		r.byRelay[k] = r.byRelay[k][:0]
	}
	for _, h := range hits {
		k := r.live[fnv(h.Key)%uint32(len(r.live))]
		o := own[h.Key]
		if o == nil {
			o = &owned{}
			own[h.Key] = o
		}
		o.count += h.Count
		o.at = now
		if k == self {
			r.add(k, h, now)
		} else {
			r.byRelay[k] = append(r.byRelay[k], h)
		}
	}
	for k, hs := range r.byRelay {
		if len(hs) > 0 {
			r.s.send(i, r.relays[k], kindReport, hs)
		}
	}
}

// tick has each relay send its aggregate at its own times: every
// Config.RelayEvery, from its report time on.
func (r *relay) tick(step int, now time.Time) {
	every := int(r.s.cfg.RelayEvery / r.s.cfg.Step)
	if r.failed || every <= 0 {
		return
	}
	for k, i := range r.relays {
		if (step-r.s.nodes[i].phase)%every == 0 {
			start := time.Now()
			r.forward(k, now)
			r.s.nodes[i].cpu += time.Since(start)
		}
	}
}

// add sums a hit into relay k's aggregate.
func (r *relay) add(k int, h bucket.Hit, now time.Time) {
	e := r.agg[k][h.Key]
	if e == nil {
		e = &held{since: now}
		r.agg[k][h.Key] = e
	}
	e.count += h.Count
}

// forward sends relay k's aggregate to every node, and applies it to the
// relay's own table. An empty aggregate is a heartbeat: it tells the
// nodes the relay is there.
func (r *relay) forward(k int, now time.Time) {
	r.out = r.out[:0]
	hot := r.hot[k]
	for key, until := range hot {
		if !now.Before(until) {
			delete(hot, key)
		}
	}
	for key, e := range r.agg[k] {
		_, isHot := hot[key]
		switch {
		case !r.hold || isHot || e.count >= r.theta:
			r.out = append(r.out, bucket.Hit{Key: key, Count: e.count})
			delete(r.agg[k], key)
			if r.hold && (e.count >= r.theta || isHot && e.count >= r.keepHot) {
				hot[key] = now.Add(time.Duration(r.s.cfg.HotAges) * r.age)
			}
		case now.Sub(e.since) >= r.age:
			r.Dropped += uint64(e.count)
			delete(r.agg[k], key)
		}
	}
	sortHits(r.out)
	r.s.send(r.relays[k], -1, kindForward, r.out)
	r.applyForward(r.relays[k], r.out, now)
}

func (r *relay) receive(j int, d *datagram, now time.Time) {
	switch {
	case d.kind == kindForward:
		r.heard[j][r.relayOf(d.from)] = now
		r.applyForward(j, d.hits, now)
	case d.to >= 0: // a node's hits for this relay to sum
		k := r.relayOf(j)
		if r.failed {
			r.s.lose(d, len(r.s.nodes))
			return
		}
		for _, h := range d.hits {
			r.add(k, h, now)
		}
	default: // sent directly while no relay was heard
		apply(r.s.nodes[j], now, d.hits)
	}
}

// applyForward applies an aggregate to node j's table, less j's own hits
// that it carries.
func (r *relay) applyForward(j int, hits []bucket.Hit, now time.Time) {
	own := r.own[j]
	r.mine = r.mine[:0]
	for _, h := range hits {
		c := h.Count
		if o := own[h.Key]; o != nil {
			sub := min(c, o.count)
			c -= sub
			if o.count -= sub; o.count == 0 {
				delete(own, h.Key)
			}
		}
		if c > 0 {
			r.mine = append(r.mine, bucket.Hit{Key: h.Key, Count: c})
		}
	}
	apply(r.s.nodes[j], now, r.mine)
}

// fnv is FNV-1a of s: how a node picks a tag's relay, the same on every
// node and in every run.
func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// sortHits orders hits by key, so that a run does not depend on the
// order of a map.
func sortHits(h []bucket.Hit) {
	slices.SortFunc(h, func(a, b bucket.Hit) int { return cmp.Compare(a.Key, b.Key) })
}
