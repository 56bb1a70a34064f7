package gossip

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// simT0 is the fake clock's origin in the cluster simulations.
var simT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// simNode is one daemon of a simulated cluster: its table, its gossip node
// and the hits it sent and applied.
type simNode struct {
	name    string
	table   *bucket.Table
	node    *Node
	tr      *transport.MemTransport
	sent    uint64 // hits reported
	applied uint64 // peers' hits applied
}

// sim is a cluster of nodes over an in-memory network on a fake clock,
// run step by step: deterministic for a given seed.
type sim struct {
	t      *testing.T
	net    *transport.MemNetwork
	nodes  []*simNode
	now    time.Time
	served []time.Duration // when each served query was answered, cluster-wide
}

// newSim makes n nodes; each opt may change a node's Config before it is
// made.
func newSim(t *testing.T, n int, pol bucket.Policy, interval time.Duration, mc transport.MemConfig, opts ...func(*simNode, *Config)) *sim {
	t.Helper()
	s := &sim{t: t, now: simT0}
	s.net = transport.NewMemNetwork(mc, func() time.Time { return s.now })
	for i := 0; i < n; i++ {
		sn := &simNode{name: fmt.Sprintf("n%d", i)}
		tb, err := bucket.New(bucket.Config{Default: pol, MaxTags: 1000, MaxTagBytes: 256})
		if err != nil {
			t.Fatal(err)
		}
		sn.table = tb
		sn.tr = s.net.Join(sn.name)
		cfg := Config{
			Since:       simT0,
			Interval:    interval,
			Fingerprint: tb.Fingerprint(),
			Drain: func(dst []Hit) []Hit {
				for _, h := range tb.Drain(nil) {
					dst = append(dst, Hit{Key: h.Key, Count: h.Count})
					sn.sent += uint64(h.Count)
				}
				return dst
			},
			Apply: func(now time.Time, hits []Hit) {
				for _, h := range hits {
					tb.Spend(now, h.Key, h.Count)
					sn.applied += uint64(h.Count)
				}
			},
		}
		for _, opt := range opts {
			opt(sn, &cfg)
		}
		sn.node, err = newNode(cfg, sn.tr)
		if err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, sn)
	}
	return s
}

// query sends one query for tag to node i and records it if served.
func (s *sim) query(i int, tag string) bool {
	ok := s.nodes[i].table.Allow(s.now, []byte(tag))
	if ok {
		s.served = append(s.served, s.now.Sub(simT0))
	}
	return ok
}

// report has node i send its report now.
func (s *sim) report(i int) {
	if err := s.nodes[i].node.Report(s.now); err != nil {
		s.t.Fatal(err)
	}
}

// deliver moves every datagram due by now to its receiver and applies it.
func (s *sim) deliver() {
	s.net.Deliver(s.now)
	for _, sn := range s.nodes {
		for {
			select {
			case p, ok := <-sn.tr.Packets():
				if !ok {
					break // a node stopped or killed
				}
				sn.node.Receive(p)
				continue
			default:
			}
			break
		}
	}
}

func (s *sim) advanceTo(d time.Duration) { s.now = simT0.Add(d) }

// maxInWindow is the most queries served within any window of length w.
func maxInWindow(served []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i := range served {
		for served[i]-served[j] > w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// countBetween counts the queries served in [from, to).
func countBetween(served []time.Duration, from, to time.Duration) int {
	n := 0
	for _, at := range served {
		if at >= from && at < to {
			n++
		}
	}
	return n
}

// TestSpecTimelineOverNetwork is the worked example's A/B timeline
// (docs/protocol.md) with two gossiping nodes: reports every 5 s,
// delivered 100 ms later.
func TestSpecTimelineOverNetwork(t *testing.T) {
	s := newSim(t, 2, bucket.Policy{Rate: 1, Burst: 10}, 5*time.Second, transport.MemConfig{Delay: 100 * time.Millisecond, Seed: 1})
	const A, B = 0, 1
	type step struct {
		at     time.Duration
		node   int
		n      int
		served int
	}
	ms := time.Millisecond
	steps := []step{
		{100 * ms, A, 9, 9},
		{100 * ms, B, 8, 8},
		{200 * ms, A, 2, 1},
		{5200 * ms, A, 1, 0},
		{5200 * ms, B, 1, 0},
		{9000 * ms, A, 1, 0},
		{9100 * ms, B, 1, 1},
		{9100 * ms, A, 1, 1},
		{9200 * ms, B, 1, 0},
	}
	next := 0
	for tick := time.Duration(0); tick <= 10100*ms; tick += 100 * ms {
		s.advanceTo(tick)
		s.deliver()
		if tick > 0 && tick%(5*time.Second) == 0 {
			s.report(A)
			s.report(B)
		}
		for ; next < len(steps) && steps[next].at == tick; next++ {
			st := steps[next]
			for q := 0; q < st.n; q++ {
				if got, want := s.query(st.node, "C"), q < st.served; got != want {
					t.Fatalf("step %d (t=%v node %c query %d): got %v, want %v", next, tick, 'A'+st.node, q+1, got, want)
				}
			}
		}
	}
	if next != len(steps) {
		t.Fatalf("ran %d of %d steps", next, len(steps))
	}
	// A served 11 and B 9: with the 10 s exchange applied at 10.1 s both
	// buckets hold C's global count, 10 + 10.1 - 0.1 - 20 = 0 tokens.
	for _, sn := range s.nodes {
		st, err := sn.table.Peek(s.now, "C")
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Tokens) > 1e-9 {
			t.Errorf("%s: C at %.3f tokens at 10.1 s, want 0 on both nodes", sn.name, st.Tokens)
		}
	}
}
