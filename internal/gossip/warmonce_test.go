package gossip

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
)

// The tests of this file hold warm start and the relays to counting every
// hit exactly once on every node, on the harness of oncecluster_test.go.

// TestSpecTimelineWarmStart is the worked example (docs/protocol.md:
// burst 10, rate 1/s, reports every 5 s) on the defaults, warm start on,
// with B started 0.3 s after A: A still warms when B answers it, and
// every hit is counted once. It runs with A's report and A's repeated
// request in either order, since both fall due at the same instant.
func TestSpecTimelineWarmStart(t *testing.T) {
	for _, askFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("ask_first=%v", askFirst), func(t *testing.T) {
			c := newOnceCluster(t, bucket.Policy{Rate: 1, Burst: 10}, 5*time.Second)
			a := c.start("a", true, nil)
			c.runTo(300 * time.Millisecond)
			b := c.start("b", true, nil)
			ms := time.Millisecond
			type step struct {
				at         time.Duration
				node       *onceNode
				n, served  int
				tokens     float64 // the node's level after the step, unless NaN
				checkLevel bool
			}
			// t0 = 1.3 s is the example's t = 0.1.
			steps := []step{
				{at: 1300 * ms, node: a, n: 9, served: 9},
				{at: 1300 * ms, node: b, n: 8, served: 8},
				{at: 1400 * ms, node: a, n: 2, served: 1},
				// Both reports are in (A's at 5 s, B's at 5.3 s): -8 + 5
				// on both, as the example's t = 5.1.
				{at: 6400 * ms, node: a, n: 1, served: 0},
				{at: 6400 * ms, node: b, n: 1, served: 0},
				// t0 + 4.5 s: -3.5 tokens on both.
				{at: 5800 * ms, node: a, tokens: -3.5, checkLevel: true},
				{at: 5800 * ms, node: b, tokens: -3.5, checkLevel: true},
				// t0 + 8.9 s: 0.9 tokens, still refused; t0 + 9.2 s: served.
				{at: 10200 * ms, node: a, n: 1, served: 0},
				{at: 10200 * ms, node: b, n: 1, served: 0},
				{at: 10500 * ms, node: a, n: 1, served: 1},
				{at: 10500 * ms, node: b, n: 1, served: 1},
			}
			for len(steps) > 0 {
				next := steps[0].at
				for _, s := range steps {
					next = min(next, s.at)
				}
				for c.now.Before(simT0.Add(next)) {
					c.now = c.now.Add(10 * time.Millisecond)
					c.receive()
					if askFirst {
						for _, n := range c.nodes {
							n.node.Pace(c.now)
						}
					}
					for _, n := range c.nodes {
						if !c.now.Before(n.next) {
							c.report(n)
						}
					}
					if !askFirst {
						for _, n := range c.nodes {
							n.node.Pace(c.now)
						}
					}
				}
				var rest []step
				for _, s := range steps {
					if s.at != next {
						rest = append(rest, s)
						continue
					}
					if s.checkLevel {
						if got := c.level(s.node, "C"); math.Abs(got-s.tokens) > 0.02 {
							t.Errorf("t=%v: C on %s at %.3f tokens, want %.1f", s.at, s.node.name, got, s.tokens)
						}
						continue
					}
					if got := c.query(s.node, "C", s.n); got != s.served {
						t.Errorf("t=%v: %s served %d of %d, want %d (C at %.3f tokens)", s.at, s.node.name, got, s.n, s.served, c.level(s.node, "C"))
					}
				}
				steps = rest
			}
			for _, n := range []*onceNode{a, b} {
				if ws := n.node.WarmStats(); !ws.Warm || ws.PeersAnswered != 1 {
					t.Errorf("%s: %+v, want warm with one peer's answer", n.name, ws)
				}
			}
		})
	}
}

// TestWarmStartCountsOnce restarts a node of a cluster in each of the
// ways a warm start meets hits already counted elsewhere, and checks that
// every node, the restarted one first, then counts each hit exactly once.
func TestWarmStartCountsOnce(t *testing.T) {
	ms := time.Millisecond
	// setup starts a, b and c (all warm starting, c last), has them
	// spend at one instant, and runs past the first reports.
	setup := func(c *onceCluster) (a, b, cn *onceNode) {
		a = c.start("a", true, nil)
		b = c.start("b", true, nil)
		c.runTo(100 * ms)
		cn = c.start("c", true, nil)
		c.runTo(500 * ms)
		c.spendAll(a, 4)
		c.spendAll(b, 3)
		c.spendAll(cn, 1)
		c.runTo(1500 * ms)
		return a, b, cn
	}
	for _, tc := range []struct {
		name string
		run  func(c *onceCluster)
	}{
		{"restarted empty, two peers answering", func(c *onceCluster) {
			_, _, cn := setup(c)
			c.stop(cn)
			c.start("c", true, nil)
		}},
		{"served and heard hits before the answer", func(c *onceCluster) {
			a, _, cn := setup(c)
			c.stop(cn)
			cn = c.start("c", true, nil)
			// Before its request reaches anyone: c serves, and a serves
			// and reports, so that c hears a's report before any answer.
			c.spendAll(cn, 2)
			c.spendAll(a, 1)
			c.report(a)
		}},
		{"the answerer's unreported hits, reported after it answered", func(c *onceCluster) {
			_, b, cn := setup(c)
			c.runTo(1800 * ms)
			c.spendAll(b, 2) // b reports them at 2 s
			c.stop(cn)
			c.start("c", true, nil)
		}},
		{"the answer crossing the asker's report", func(c *onceCluster) {
			_, _, cn := setup(c)
			c.stop(cn)
			cn = c.start("c", true, nil)
			c.spendAll(cn, 1)
			c.step() // the request arrives and is answered
			c.report(cn)
		}},
		{"the node that started first", func(c *onceCluster) {
			a := c.start("a", true, nil)
			c.runTo(300 * ms)
			b := c.start("b", true, nil)
			c.runTo(500 * ms)
			c.spendAll(a, 3)
			c.spendAll(b, 2)
			c.runTo(1050 * ms) // a's report at 1 s: a still warms, and asks again; b answers
			c.spendAll(a, 1)
			c.start("c", true, nil)
		}},
		{"a state file and the peers", func(c *onceCluster) {
			_, _, cn := setup(c)
			c.spendAll(cn, 2) // unreported at the stop: the last report carries them
			file := c.stop(cn)
			c.start("c", true, file)
		}},
		{"a state file without the last report", func(c *onceCluster) {
			_, _, cn := setup(c)
			c.spendAll(cn, 2)
			c.report(cn)
			c.runTo(1600 * ms)
			file := c.stop(cn)
			c.start("c", true, file)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newOnceCluster(t, bucket.Policy{Rate: 0.5, Burst: 20}, time.Second)
			tc.run(c)
			c.runTo(c.now.Sub(simT0) + 2500*ms) // every report in, warm starts done
			for _, n := range c.nodes {
				if ws := n.node.WarmStats(); !ws.Warm {
					t.Errorf("%s: not warm: %+v", n.name, ws)
				}
			}
			c.exact("after the restart", onceTags...)
		})
	}
}

// TestWarmStartCountsOnceThroughRelays is TestWarmStartCountsOnce with
// relays: a node's hits reach its peers only in a relay's aggregate, so
// until it comes back a node's own hits are as unreported to an asker. A
// relay restarts; a node restarts while another's hits sit at a relay.
func TestWarmStartCountsOnceThroughRelays(t *testing.T) {
	ms := time.Millisecond
	for _, restart := range []string{"r1", "n2"} {
		t.Run("restart "+restart, func(t *testing.T) {
			c := newOnceCluster(t, bucket.Policy{Rate: 0.5, Burst: 20}, time.Second)
			c.relay = map[string]relay.Mode{"r1": relay.Serve, "r2": relay.Serve, "n1": relay.Use, "n2": relay.Use}
			nodes := map[string]*onceNode{}
			for i, name := range []string{"r1", "r2", "n1", "n2"} {
				nodes[name] = c.start(name, true, nil)
				c.runTo(time.Duration(i+1) * 130 * ms)
			}
			c.runTo(2600 * ms) // the relays are heard
			for _, n := range nodes {
				c.spendAll(n, 2)
			}
			c.runTo(3900 * ms)
			c.spendAll(nodes["n1"], 1)
			c.spendAll(nodes["r1"], 1)
			// Right after n1's and r1's reports, before the relays pass
			// their sums on: their hits are at a relay.
			c.runTo(4030 * ms)
			c.stop(nodes[restart])
			c.start(restart, true, nil)
			c.runTo(7 * time.Second)
			for _, n := range c.nodes {
				if ws := n.node.WarmStats(); !ws.Warm || ws.PeersAnswered == 0 {
					t.Errorf("%s: %+v", n.name, ws)
				}
			}
			c.exact("after the restart", onceTags...)
		})
	}
}

// TestWarmStartAnswerSpansAReport has the answer of a large table, paced
// over more than an interval, cross the answerer's report: the levels it
// sent before, those it held exported when it reported, and those it
// exported after, each count the answerer's hits once.
func TestWarmStartAnswerSpansAReport(t *testing.T) {
	ms := time.Millisecond
	c := newOnceCluster(t, bucket.Policy{Rate: 0.5, Burst: 20}, time.Second)
	c.maxTags, c.rate = 8192, 40 // 8 parts, about 1.4 s of answer
	a := c.start("a", true, nil)
	b := c.start("b", true, nil)
	c.runTo(300 * ms)
	var tags []string
	for i := range 1600 {
		tags = append(tags, fmt.Sprintf("203.0.113.%d:%d", i%250, i))
	}
	for _, tag := range tags {
		c.query(a, tag, 3)
		c.query(b, tag, 1)
	}
	c.runTo(1500 * ms)
	for _, tag := range tags {
		c.query(b, tag, 2) // b reports them at 2 s, amid its answer
	}
	cn := c.start("c", true, nil)
	c.runTo(2500 * ms)
	if ws := b.node.WarmStats(); ws.AnswersSent < 20 {
		t.Fatalf("b's answer took %d datagrams: too few to span its report", ws.AnswersSent)
	}
	c.runTo(5 * time.Second)
	if ws := cn.node.WarmStats(); !ws.Warm || ws.PeersAnswered != 2 {
		t.Fatalf("c: %+v", ws)
	}
	// Levels wait in hand up to a part's pacing (a part of some 200 to
	// 300 tags is 6 to 9 datagrams at 40 a second: up to 0.25 s, and the
	// parts fall differently with each run's hash seed), and have not
	// refilled the r*wait of that wait, up to 0.15 token; a hit counted
	// twice or missed is a whole token, so the check allows under half.
	c.within("after the answer", 0.4, tags...)
}

// TestRelayAggregatesCountOnce holds the relays' path to the exact count
// without a restart: each node applies a relay's aggregate less its own
// hits it carries, and a relay applies its sums when it passes them on,
// so after every aggregate each node counts every hit once, neither its
// own twice nor another's not at all, however the hits fall between the
// intervals of the nodes and the relays.
func TestRelayAggregatesCountOnce(t *testing.T) {
	ms := time.Millisecond
	c := newOnceCluster(t, bucket.Policy{Rate: 0.5, Burst: 40}, time.Second)
	c.relay = map[string]relay.Mode{"r1": relay.Serve, "r2": relay.Serve, "n1": relay.Use, "n2": relay.Use, "n3": relay.Use}
	var nodes []*onceNode
	for i, name := range []string{"r1", "r2", "n1", "n2", "n3"} {
		nodes = append(nodes, c.start(name, true, nil))
		c.runTo(time.Duration(i+1) * 170 * ms)
	}
	c.runTo(2600 * ms) // the relays are heard
	for _, n := range nodes {
		c.spendAll(n, 1)
	}
	for round := range 6 {
		// Hits at a different point of the intervals each round.
		c.runTo(c.now.Sub(simT0) + time.Duration(130+97*round)*ms)
		for i, n := range nodes {
			if (i+round)%2 == 0 {
				c.spendAll(n, 1+round%3)
			}
		}
		c.runTo(c.now.Sub(simT0) + 2500*ms) // every hit at a relay and back
		c.exact(fmt.Sprintf("round %d", round), onceTags...)
	}
}
