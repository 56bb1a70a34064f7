package sim

import (
	"math"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// design is a way of reporting: what a node sends at its report time and
// what it does with a datagram it receives.
type design interface {
	report(i int, now time.Time)
	receive(j int, d *datagram, now time.Time)
	fail() // every relay falls silent from now on
}

// designs makes each design for a run.
var designs = map[string]func(*sim) design{
	"today":      func(s *sim) design { return &today{s: s} },
	"holdback":   newHoldback,
	"relay":      func(s *sim) design { return newRelay(s, false) },
	"relay-hold": func(s *sim) design { return newRelay(s, true) },
	"owner":      newOwner,
}

// Designs names the reporting designs and says what each does.
var Designs = map[string]string{
	"today": "every node sends all its hits of the interval to every other node (multicast), each applies all",
	"holdback": "as today, but a node holds a tag's hits until they reach ceil(hold*burst) " +
		"or have waited burst/rate (the hold age), then sends them",
	"relay": "every node sends its hits to one of the segment's relays (by tag); each relay sums them per tag " +
		"and sends one aggregate per interval to every node, which subtracts its own part; nodes send directly " +
		"while no relay is heard",
	"owner": "each tag has an owner (a hash over the nodes): a node sends its hits of a tag to the tag's owner only; " +
		"the owner, whose bucket then counts every node's hits, sends the tags below half their burst, with their level, " +
		"back to the nodes that reported them, which take the lower bucket",
	"relay-hold": "relay, and each relay holds a tag's summed hits until they reach ceil(hold*burst); " +
		"a tag whose summed hits stay below that for the hold age (under half its rate) is dropped",
}

// threshold is the hold-back threshold in hits: ceil(Hold*Burst), at
// least 1.
func (c Config) threshold() uint32 {
	return uint32(max(1, math.Ceil(c.Hold*float64(c.Burst)-1e-9)))
}

// holdAge is the longest a hit is held: the time the bucket takes to
// refill, burst/rate, rounded up to whole intervals.
func (c Config) holdAge() time.Duration {
	a := bucket.Policy{Rate: c.Rate, Burst: c.Burst}.Refill()
	return max(c.Interval, (a+c.Interval-1)/c.Interval*c.Interval)
}

// delay is the delivery delay d of the bounds: one step of delivery and
// one of the clock's resolution.
func (c Config) delay() time.Duration { return 2 * c.Step }

// Bound is the most the cluster may serve one tag over a window of w
// under cfg's design (see docs/scaling.md):
//
//	today:      b + r*w + (N-1)*(b + r*(I+d))   (owner: the same)
//	holdback:   b + r*w + (N-1)*(b + r*(I+d) + (θ-1))
//	relay:      b + r*w + (N-1)*(b + r*(2I+3d))
//	relay-hold: b + r*w + (N-1)*(b + r*(2I+3d) + 2(θ-1)) + (θ-1)*(1 + w/A)
//
// with θ the hold-back threshold and A the hold age.
func Bound(cfg Config, w time.Duration) float64 {
	b, r := float64(cfg.Burst), cfg.Rate
	i, d := cfg.Interval.Seconds(), cfg.delay().Seconds()
	theta := float64(cfg.threshold())
	perNode := b + r*(i+d)
	extra := 0.0
	switch cfg.Design {
	case "holdback":
		perNode += theta - 1
	case "relay":
		perNode = b + r*(2*i+3*d)
	case "relay-hold":
		perNode = b + r*(2*i+3*d) + 2*(theta-1)
		extra = (theta - 1) * (1 + w.Seconds()/cfg.holdAge().Seconds())
	}
	return b + r*w.Seconds() + float64(cfg.Nodes-1)*perNode + extra
}

// today is the protocol as it is: every node multicasts all its hits.
type today struct{ s *sim }

func (t *today) report(i int, now time.Time) {
	t.s.send(i, -1, kindReport, t.s.drain(i))
}

func (t *today) receive(j int, d *datagram, now time.Time) { apply(t.s.nodes[j], now, d.hits) }

func (t *today) fail() {}

// apply subtracts hits a peer served from n's table.
func apply(n *node, now time.Time, hits []bucket.Hit) {
	n.table.SpendBatch(now, hits)
	n.remote += len(hits)
}

// held is a tag's hits held back, and since when.
type held struct {
	count uint32
	since time.Time
}

// holdback is today's protocol with each node holding a tag's hits until
// they reach the threshold or the hold age.
type holdback struct {
	s     *sim
	held  []map[string]*held // per node
	out   []bucket.Hit
	theta uint32
	age   time.Duration
}

func newHoldback(s *sim) design {
	h := &holdback{s: s, held: make([]map[string]*held, len(s.nodes)), theta: s.cfg.threshold(), age: s.cfg.holdAge()}
	for i := range h.held {
		h.held[i] = map[string]*held{}
	}
	return h
}

func (h *holdback) report(i int, now time.Time) {
	m := h.held[i]
	for _, hit := range h.s.drain(i) {
		e := m[hit.Key]
		if e == nil {
			e = &held{since: now}
			m[hit.Key] = e
		}
		e.count += hit.Count
	}
	h.out = h.out[:0]
	for k, e := range m {
		if e.count >= h.theta || now.Sub(e.since) >= h.age {
			h.out = append(h.out, bucket.Hit{Key: k, Count: e.count})
			delete(m, k)
		}
	}
	sortHits(h.out)
	h.s.send(i, -1, kindReport, h.out)
}

func (h *holdback) receive(j int, d *datagram, now time.Time) { apply(h.s.nodes[j], now, d.hits) }

func (h *holdback) fail() {}
