package gossip

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// received takes every datagram delivered to node i so far, unapplied.
func (s *sim) received(i int) []transport.Packet {
	s.net.Deliver(s.now)
	var out []transport.Packet
	for {
		select {
		case p := <-s.nodes[i].tr.Packets():
			out = append(out, p)
			continue
		default:
		}
		return out
	}
}

// TestMembersSteps holds the membership of node 0 of three to its steps
// at fixed instants: live peers; node 2 cut off and silent past the
// silence timeout is missing (share 2/3); heard again, live at once, by
// its datagram; cut off again and silent past the forget time,
// forgotten (share 1); heard again then, counted at the next check.
func TestMembersSteps(t *testing.T) {
	s := newSim(t, 3, bucket.Policy{Rate: 1, Burst: 10}, time.Second, transport.MemConfig{},
		func(sn *simNode, cfg *Config) { cfg.ForgetAfter = 10 * time.Second })
	n0 := s.nodes[0].node
	type step struct {
		at           time.Duration
		cut, heal    bool // node 2 cut off, or heard again, from now on
		check        bool // node 0 checks its peers after the reports, as its loop does
		live, missed int
		share        float64
	}
	steps := []step{
		{at: time.Second, check: true, live: 2, share: 1},
		{at: 2 * time.Second, cut: true, check: true, live: 2, share: 1},
		{at: 4 * time.Second, check: true, live: 2, share: 1},                 // 3 s unheard: not past the timeout
		{at: 5 * time.Second, check: true, live: 1, missed: 1, share: 2. / 3}, // 4 s
		{at: 6 * time.Second, heal: true, live: 2, share: 1},                  // no check: the datagram counts it
		{at: 7 * time.Second, cut: true, check: true, live: 2, share: 1},
		{at: 11 * time.Second, check: true, live: 1, missed: 1, share: 2. / 3},
		{at: 16 * time.Second, check: true, live: 1, missed: 1, share: 2. / 3}, // last heard at 6 s: 10 s unheard
		{at: 17 * time.Second, check: true, live: 1, share: 1},                 // 11 s: forgotten
		{at: 18 * time.Second, heal: true, live: 1, share: 1},                  // heard, not yet counted
		{at: 19 * time.Second, check: true, live: 2, share: 1},
	}
	for i, st := range steps {
		s.advanceTo(st.at)
		if st.cut {
			s.net.Partition([]string{"n0", "n1"}, []string{"n2"})
		}
		if st.heal {
			s.net.Partition()
		}
		for j := range s.nodes {
			s.report(j)
		}
		s.deliver()
		if st.check {
			n0.checkSilence(s.now)
			n0.checkMembers(s.now)
		}
		if m := n0.Members(); m.Live != st.live || len(m.Missing) != st.missed || m.Share != st.share {
			t.Errorf("step %d (t=%v): got %+v, want live %d, missing %d, share %.3f", i, st.at, m, st.live, st.missed, st.share)
		}
	}
}

// TestGoodbye: a goodbye counts its sender out at once, before it could
// be missing; a report of the same node arriving after it (reordered) is
// applied but does not count it back in; and under a key a forged
// goodbye is dropped.
func TestGoodbye(t *testing.T) {
	key := []byte("a secret of sixteen bytes")
	s := newSim(t, 3, bucket.Policy{Rate: 1, Burst: 10}, time.Second, transport.MemConfig{},
		func(sn *simNode, cfg *Config) { cfg.Key = key })
	for j := range s.nodes {
		s.report(j)
	}
	s.deliver()
	n0 := s.nodes[0].node
	n0.checkMembers(s.now)
	if m := n0.Members(); m.Live != 2 {
		t.Fatalf("before: %+v, want 2 live", m)
	}

	// A goodbye in node 1's name, signed with another key.
	forger := wire.Encoder{Node: s.nodes[1].node.ID(), MaxPacket: 1400, Key: []byte("not the secret, no")}
	forger.EncodeGoodbye(s.now, func(pkt []byte) error {
		n0.Receive(transport.Packet{Data: pkt, From: "x", At: s.now})
		return nil
	})
	if m, st := n0.Members(), n0.Stats(); m.Left != 0 || st.DroppedAuth != 1 {
		t.Errorf("forged goodbye: %+v, %d dropped (auth); want heeded by nobody, 1 dropped", m, st.DroppedAuth)
	}

	// Node 1 stops: its last report, then goodbye; node 0 takes them in
	// the reverse order.
	s.advanceTo(time.Second)
	if !s.query(1, "tag") {
		t.Fatal("refused")
	}
	s.report(1)
	if err := s.nodes[1].node.sayGoodbye(s.now); err != nil {
		t.Fatal(err)
	}
	ps := s.received(0)
	if len(ps) != 2 {
		t.Fatalf("node 0 got %d datagrams, want the report and the goodbye", len(ps))
	}
	n0.Receive(ps[1])
	if m := n0.Members(); m.Left != 1 || m.Live != 1 || m.Share != 1 {
		t.Errorf("after the goodbye: %+v, want node 1 gone, node 2 live, share 1", m)
	}
	n0.Receive(ps[0])
	n0.checkMembers(s.now)
	if m := n0.Members(); m.Left != 1 || m.Live != 1 {
		t.Errorf("the report after the goodbye: %+v, want node 1 still gone", m)
	}
	if s.nodes[0].applied != 1 {
		t.Errorf("node 0 applied %d hits, want the report's 1", s.nodes[0].applied)
	}
	// Long after, node 1 is never missing: it left.
	s.advanceTo(30 * time.Second)
	s.report(0)
	s.report(2)
	s.deliver()
	n0.checkSilence(s.now)
	n0.checkMembers(s.now)
	if m := n0.Members(); len(m.Missing) != 0 || m.Share != 1 {
		t.Errorf("30 s on: %+v, want nobody missing", m)
	}
	var left bool
	for _, p := range n0.Peers() {
		if p.Node == s.nodes[1].node.ID() {
			left = p.Left && !p.Missing
		}
	}
	if !left {
		t.Error("the peers view does not show node 1 as left")
	}
}

// TestMembersMetrics: the share, the peers missing and how far behind
// each peer heard is, as the metrics give them.
func TestMembersMetrics(t *testing.T) {
	s := newSim(t, 3, bucket.Policy{Rate: 1, Burst: 10}, time.Second, transport.MemConfig{Delay: 20 * time.Millisecond})
	n0 := s.nodes[0].node
	mt.Lint(t, n0.Collectors()...)
	for j := range s.nodes {
		s.report(j)
	}
	s.advanceTo(20 * time.Millisecond)
	s.deliver()
	s.net.Partition([]string{"n0", "n1"}, []string{"n2"})
	s.advanceTo(5 * time.Second)
	s.report(1)
	s.advanceTo(5*time.Second + 20*time.Millisecond)
	s.deliver()
	n0.checkSilence(s.now)
	n0.checkMembers(s.now)
	const gauge = mt.Gauge
	mt.Expect(t, mt.Gather(t, n0.Collectors()...),
		mt.Sample{Name: "dthrottle_gossip_share", Kind: gauge, Value: 2. / 3},
		mt.Sample{Name: "dthrottle_gossip_peers_missing", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_gossip_peer_behind_seconds", Labels: "node=" + peer.Name(s.nodes[1].node.ID()), Kind: gauge, Value: 1.02},
	)
	if fams := mt.Gather(t, n0.Collectors()...); len(fams["dthrottle_gossip_peer_behind_seconds"].GetMetric()) != 1 {
		t.Error("a silent peer's delay is served: want the live peer's only")
	}
}
