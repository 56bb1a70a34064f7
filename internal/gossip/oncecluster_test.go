package gossip

import (
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
)

// This file holds the harness of the tests that hold warm start and the
// relays to counting every hit exactly once on every node
// (warmonce_test.go): whole nodes with real tables on a fake clock and an
// in-memory network, started, stopped and restarted at chosen instants.
//
// The oracle: a bucket that stays below its burst from a tag's first hit
// on is never clamped at full, so every hit moves its theoretical arrival
// time by exactly one period whatever the order the hits arrive in. Such a
// tag's level on a node that knows every hit is exactly b - N + r*(now -
// first), N the hits served cluster-wide: a hit counted twice shows as a
// token too few, a hit missed as a token too many.

// onceNode is one daemon: its table and gossip node.
type onceNode struct {
	name  string
	table *bucket.Table
	node  *Node
	tr    *transport.MemTransport
	next  time.Time // its next report
}

// onceCluster runs nodes in steps of 10 ms on a fake clock: deliver,
// receive, pace, report those due.
type onceCluster struct {
	t        *testing.T
	net      *transport.MemNetwork
	now      time.Time
	interval time.Duration
	pol      bucket.Policy
	maxTags  int
	rate     float64 // snapshot datagrams a second
	nodes    []*onceNode
	relay    map[string]relay.Mode // by node name; relay.Off when absent
	served   map[string]int        // hits served cluster-wide, by tag
	first    map[string]time.Time  // each tag's first hit
}

func newOnceCluster(t *testing.T, pol bucket.Policy, interval time.Duration) *onceCluster {
	c := &onceCluster{t: t, now: simT0, interval: interval, pol: pol, maxTags: 1000, rate: warm.DefaultRate,
		relay: map[string]relay.Mode{}, served: map[string]int{}, first: map[string]time.Time{}}
	c.net = transport.NewMemNetwork(transport.MemConfig{Delay: time.Millisecond, Seed: 1}, func() time.Time { return c.now })
	return c
}

// start starts a node named name now, warm starting if warm, after
// merging file (a state file's levels, as ExportShard gives them).
func (c *onceCluster) start(name string, warm bool, file []bucket.Level) *onceNode {
	c.t.Helper()
	tb, err := bucket.New(bucket.Config{Default: c.pol, MaxTags: c.maxTags, MaxTagBytes: 256})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(file) > 0 {
		tb.Merge(c.now, 0, file)
	}
	on := &onceNode{name: name, table: tb, tr: c.net.Join(name), next: c.now.Add(c.interval)}
	on.node, err = newNode(Config{
		Since: c.now, Interval: c.interval, SnapshotRate: c.rate,
		Fingerprint: tb.Fingerprint(),
		Drain:       tb.Drain,
		Apply: func(now time.Time, hits []Hit) {
			for _, h := range hits {
				tb.Spend(now, h.Key, h.Count)
			}
		},
		Export: func(now time.Time, part int, dst []Level, keys []byte) ([]Level, []byte, bool) {
			if part >= tb.Shards() {
				return dst, keys, false
			}
			dst, keys = tb.ReportedShard(now, part, dst, keys)
			return dst, keys, part+1 < tb.Shards()
		},
		Merge:  func(now time.Time, levels []Level) int { return tb.Merge(now, 0, levels) },
		Relay:  relay.Config{Mode: c.relay[name], MaxAge: 10 * c.interval},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, on.tr)
	if err != nil {
		c.t.Fatal(err)
	}
	if warm {
		if err := on.node.Warm(c.now); err != nil {
			c.t.Fatal(err)
		}
	}
	c.nodes = append(c.nodes, on)
	return on
}

// stop stops n cleanly: its last report, then its state file's levels.
func (c *onceCluster) stop(n *onceNode) []bucket.Level {
	c.t.Helper()
	if err := n.node.Report(c.now); err != nil {
		c.t.Fatal(err)
	}
	var file []bucket.Level
	n.table.Export(c.now, func(ls []bucket.Level) error {
		for _, l := range ls {
			file = append(file, bucket.Level{Key: append([]byte(nil), l.Key...), Tokens: l.Tokens})
		}
		return nil
	})
	n.tr.Close()
	for i, o := range c.nodes {
		if o == n {
			c.nodes = append(c.nodes[:i], c.nodes[i+1:]...)
		}
	}
	return file
}

// step runs one 10 ms step: what is due arrives and is applied, answers
// are paced, and the nodes whose interval is up report (in the order
// given, or in start order).
func (c *onceCluster) step() {
	c.now = c.now.Add(10 * time.Millisecond)
	c.receive()
	for _, n := range c.nodes {
		n.node.Pace(c.now)
	}
	for _, n := range c.nodes {
		if !c.now.Before(n.next) {
			c.report(n)
		}
	}
}

// receive delivers what is due and has every node apply it.
func (c *onceCluster) receive() {
	c.net.Deliver(c.now)
	for _, n := range c.nodes {
		for {
			select {
			case p := <-n.tr.Packets():
				n.node.Receive(p)
				continue
			default:
			}
			break
		}
	}
}

// report has n report now, and sets its next report an interval on.
func (c *onceCluster) report(n *onceNode) {
	c.t.Helper()
	if err := n.node.Report(c.now); err != nil {
		c.t.Fatal(err)
	}
	n.next = c.now.Add(c.interval)
}

// runTo steps until at.
func (c *onceCluster) runTo(at time.Duration) {
	for c.now.Before(simT0.Add(at)) {
		c.step()
	}
}

// query asks n count times for tag and returns how many it served.
func (c *onceCluster) query(n *onceNode, tag string, count int) int {
	served := 0
	for range count {
		if n.table.Allow(c.now, []byte(tag)) {
			served++
		}
	}
	if served > 0 {
		if _, ok := c.first[tag]; !ok {
			c.first[tag] = c.now
		}
		c.served[tag] += served
	}
	return served
}

// level is tag's tokens on n now.
func (c *onceCluster) level(n *onceNode, tag string) float64 {
	c.t.Helper()
	st, err := n.table.Peek(c.now, tag)
	if err != nil {
		c.t.Fatal(err)
	}
	return st.Tokens
}

// exact checks that every node counts every hit served of each tag
// exactly once: its level is b - N + r*(now - first hit), to within the
// refill of a few deliveries.
func (c *onceCluster) exact(what string, tags ...string) {
	c.t.Helper()
	c.within(what, 0.05, tags...)
}

// within is exact to within tol tokens: a level merged as of its arrival
// has not refilled while it waited to be sent, which a long answer paced
// over seconds shows.
func (c *onceCluster) within(what string, tol float64, tags ...string) {
	c.t.Helper()
	for _, tag := range tags {
		want := float64(c.pol.Burst) - float64(c.served[tag]) + c.pol.Rate*c.now.Sub(c.first[tag]).Seconds()
		if want >= float64(c.pol.Burst) {
			c.t.Fatalf("%s: %s is full again by now: the oracle needs a bucket below its burst", what, tag)
		}
		for _, n := range c.nodes {
			got := c.level(n, tag)
			if d := got - want; math.Abs(d) > tol {
				c.t.Errorf("%s: %s on %s: %.3f tokens, want %.3f: %+.2f hits %s", what, tag, n.name, got, want,
					-d, map[bool]string{true: "counted twice", false: "missed"}[d < 0])
			}
		}
	}
}

// onceTags are the tags the scenarios spend.
var onceTags = []string{"t1", "t2", "t3", "t4"}

// spendAll serves hits of every onceTag on n.
func (c *onceCluster) spendAll(n *onceNode, hits int) {
	for _, tag := range onceTags {
		if got := c.query(n, tag, hits); got != hits {
			c.t.Fatalf("%s served %d of %d of %s", n.name, got, hits, tag)
		}
	}
}
