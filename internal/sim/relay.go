package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	ledger "github.com/dthrottle/dthrottle/internal/gossip/relay"
)

// relay is the relay designs: the first Relays nodes of the segment are
// its relays as well as ordinary nodes. Every node sends each tag's hits
// to one relay, chosen by the tag among the relays it hears (so each relay
// sums a share of the tags); each relay sums what it gets per tag and, at
// its own report time, sends one aggregate to every node. The aggregate
// includes the receiver's own hits: each node remembers what it sent to
// the relays and not yet seen come back, and subtracts it. A node that
// hears no relay for the silence timeout sends its hits directly to every
// node, as today. With hold set, a relay holds a tag's sum as
// ledger.Sum says (until it reaches the threshold; hot tags at every
// aggregate; sums too sparse to matter dropped); without, it passes every
// sum on at the next aggregate. The ledgers are the gossip package's own
// (ledger.Sum, ledger.OwnHits, gossip.PickRelay).
type relay struct {
	s      *sim
	hold   bool
	relays []int // node index of each relay
	failed bool

	agg   []*ledger.Sum     // per relay: hits summed and not yet sent
	own   []*ledger.OwnHits // per node: hits sent to a relay and not yet come back
	heard [][]time.Time     // per node, per relay: when its last aggregate arrived

	silentAfter time.Duration
	byRelay     [][]gossip.Hit
	live        []int
	out         []gossip.Hit
	mine        []gossip.Hit
}

func newRelay(s *sim, hold bool) design {
	n := min(s.cfg.Relays, len(s.nodes))
	r := &relay{s: s, hold: hold,
		agg: make([]*ledger.Sum, n), own: make([]*ledger.OwnHits, len(s.nodes)),
		heard: make([][]time.Time, len(s.nodes)), byRelay: make([][]gossip.Hit, n),
		silentAfter: gossip.SilentAfter(s.cfg.Interval)}
	theta, age := s.cfg.threshold(), s.cfg.holdAge()
	if !hold {
		theta = 1 // a sum of one hit is passed on: nothing is held
	}
	holdFn := func(string) (uint32, time.Duration) { return theta, age }
	forget := 2*s.cfg.Interval + 4*s.cfg.Step
	if hold {
		forget += age
	}
	for k := range n {
		r.relays = append(r.relays, k)
		r.agg[k] = ledger.NewSum(holdFn, s.cfg.HotAges, s.cfg.RelayEvery)
	}
	for i := range s.nodes {
		r.own[i] = ledger.NewOwnHits(forget)
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
	own.Forget(now)
	if len(r.live) == 0 {
		r.s.send(i, -1, kindReport, hits) // no relay heard: directly, as today
		return
	}
	for k := range r.byRelay {
		r.byRelay[k] = r.byRelay[k][:0]
	}
	for _, h := range hits {
		k := r.live[ledger.Pick(h.Key, len(r.live))]
		r.byRelay[k] = append(r.byRelay[k], h)
	}
	for k, hs := range r.byRelay {
		own.Sent(now, hs)
		if k == self {
			r.agg[k].Add(now, hs)
		} else if len(hs) > 0 {
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

// forward sends relay k's aggregate to every node, and applies it to the
// relay's own table. An empty aggregate is a heartbeat: it tells the
// nodes the relay is there.
func (r *relay) forward(k int, now time.Time) {
	r.out = r.agg[k].Flush(now, r.out[:0])
	r.s.send(r.relays[k], -1, kindForward, r.out)
	r.applyForward(r.relays[k], r.out, now)
}

func (r *relay) receive(j int, d *datagram, now time.Time) {
	switch {
	case d.kind == kindForward:
		r.heard[j][r.relayOf(d.from)] = now
		r.applyForward(j, d.hits, now)
	case d.to >= 0: // a node's hits for this relay to sum
		if r.failed {
			r.s.lose(d, len(r.s.nodes))
			return
		}
		r.agg[r.relayOf(j)].Add(now, d.hits)
	default: // sent directly while no relay was heard
		apply(r.s.nodes[j], now, d.hits)
	}
}

// applyForward applies an aggregate to node j's table, less j's own hits
// that it carries.
func (r *relay) applyForward(j int, agg []gossip.Hit, now time.Time) {
	r.mine = r.own[j].Others(agg, r.mine[:0])
	apply(r.s.nodes[j], now, r.mine)
}

// dropped is the hits the relays dropped as too sparse to matter.
func (r *relay) dropped() uint64 {
	var n uint64
	for _, a := range r.agg {
		n += a.Stats().Dropped
	}
	return n
}

// sortHits orders hits by key, so that a run does not depend on the
// order of a map.
func sortHits(h []bucket.Hit) {
	slices.SortFunc(h, func(a, b bucket.Hit) int { return cmp.Compare(a.Key, b.Key) })
}
