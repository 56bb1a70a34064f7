package gossip

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// relayNode is a testNode that relays as mode says, with an optional link
// to other segments.
type relayNode struct {
	*testNode
	link *transport.MemTransport
}

func newRelayNode(t *testing.T, seg *transport.MemNetwork, link *transport.MemNetwork, name string, mode relay.Mode, hold relay.HoldFunc) *relayNode {
	t.Helper()
	rn := &relayNode{}
	cfg := relay.Config{Mode: mode, Hold: hold, MaxAge: 2 * time.Second}
	if link != nil {
		rn.link = link.Join(name)
		cfg.Link = rn.link
	}
	rn.testNode = newTestNodeWith(t, seg.Join(name), func(c *Config) { c.Relay = cfg })
	return rn
}

func (rn *relayNode) receiveAll() {
	rn.testNode.receiveAll()
	if rn.link == nil {
		return
	}
	for {
		select {
		case p := <-rn.link.Packets():
			rn.Receive(p)
		default:
			return
		}
	}
}

func (rn *relayNode) got(key string) uint32 {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.applied[key]
}

// relayRound has every node in up report at now, then delivers what was
// sent (on the segments and links given) and has every node take it in.
func relayRound(t *testing.T, now time.Time, up []*relayNode, nets ...*transport.MemNetwork) {
	t.Helper()
	for _, n := range up {
		if err := n.Report(now); err != nil && !errors.Is(err, transport.ErrNoUnicast) {
			t.Fatalf("%s: %v", n.tr.Name(), err)
		}
	}
	for _, net := range nets {
		net.Deliver(now)
	}
	for _, n := range up {
		n.receiveAll()
		n.checkSilence(now)
	}
}

// TestRelaySegment: two relays and four nodes. Once the relays are heard,
// every node applies every other node's hits exactly once, receives one
// aggregate per relay per interval instead of one report per peer, and
// the peers view marks the relays.
func TestRelaySegment(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	var all []*relayNode
	for i := range 6 {
		mode := relay.Use
		if i < 2 {
			mode = relay.Serve
		}
		all = append(all, newRelayNode(t, net, nil, fmt.Sprintf("n%d", i), mode, nil))
	}
	const rounds = 8
	for range rounds {
		for i, n := range all {
			n.serve("shared", 1)
			n.serve(fmt.Sprintf("own%d", i), 2)
		}
		relayRound(t, now, all, net)
		now = now.Add(time.Second)
	}
	before := all[4].Stats().PacketsReceived
	for range 3 { // nothing served: what was sent is passed on
		relayRound(t, now, all, net)
		now = now.Add(time.Second)
	}
	if got := all[4].Stats().PacketsReceived - before; got != 6 {
		t.Errorf("a node received %d datagrams in 3 quiet intervals, want 6 (one aggregate per relay per interval)", got)
	}
	for i, n := range all {
		if got := n.got("shared"); got != 5*rounds {
			t.Errorf("n%d applied %d hits of the shared tag, want %d (every other node's, once)", i, got, 5*rounds)
		}
		if got := n.got(fmt.Sprintf("own%d", i)); got != 0 {
			t.Errorf("n%d applied %d of its own hits back", i, got)
		}
		for j := range all {
			if j != i && n.got(fmt.Sprintf("own%d", j)) != 2*rounds {
				t.Errorf("n%d applied %d hits of own%d, want %d", i, n.got(fmt.Sprintf("own%d", j)), j, 2*rounds)
			}
		}
		st := n.Stats().Relay
		if st.Relays+btoi(i < 2) != 2 || st.OwnPending != 0 {
			t.Errorf("n%d: relay stats %+v, want 2 relays (itself counted apart) and nothing pending", i, st)
		}
	}
	st := all[5].Stats().Relay
	if st.Mode != "use" || st.ViaRelays < rounds-1 || st.Direct != 1 || st.ToRelayPackets == 0 {
		t.Errorf("a node's relay stats: %+v, want mode use, reports via relays and one sent directly before any relay was heard", st)
	}
	if rs := all[0].Stats().Relay; rs.AggregatePackets != rounds+3 || rs.ToRelayReceived == 0 || rs.Sum.Passed == 0 {
		t.Errorf("a relay's stats: %+v, want one aggregate per interval", rs)
	}
	var relays int
	for _, p := range all[3].Peers() {
		if p.Relay == peer.RelayOfSegment {
			relays++
		}
	}
	if relays != 2 {
		t.Errorf("peers view of n3 marks %d relays, want 2: %+v", relays, all[3].Peers())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRelayFallback: when the relays fall silent, nodes send their hits to
// every peer after the silence timeout, and do not log each other as
// silent meanwhile.
func TestRelayFallback(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 2}, func() time.Time { return now })
	var all []*relayNode
	for i := range 4 {
		mode := relay.Use
		if i < 2 {
			mode = relay.Serve
		}
		all = append(all, newRelayNode(t, net, nil, fmt.Sprintf("n%d", i), mode, nil))
	}
	for range 3 {
		relayRound(t, now, all, net)
		now = now.Add(time.Second)
	}
	nodes := all[2:]
	net.Partition([]string{"n0", "n1"}, []string{"n2", "n3"}) // the relays are gone
	for range 5 {
		nodes[0].serve("x", 1)
		relayRound(t, now, nodes, net)
		now = now.Add(time.Second)
	}
	// Hits sent to a relay before the silence timeout are lost; those
	// after reach the other node directly.
	if got := nodes[1].got("x"); got < 1 || got > 3 {
		t.Errorf("n3 applied %d of n2's 5 hits, want those sent after the timeout (1 to 3)", got)
	}
	if st := nodes[0].Stats().Relay; st.Direct < 2 || st.Relays != 0 {
		t.Errorf("n2's relay stats %+v: want reports sent directly and no relay heard", st)
	}
	if l := nodes[0].log.String(); !strings.Contains(l, "relay went silent") || strings.Contains(l, "peer went silent") {
		t.Errorf("n2's log: want the relays logged silent, and not n3:\n%s", l)
	}
}

// TestRelayHold: a relay holds a sparse tag's sum until it reaches the
// threshold, passes a busy tag at once, and drops a sum that stays under
// the threshold for its hold age.
func TestRelayHold(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 3}, func() time.Time { return now })
	hold := func(string) (uint32, time.Duration) { return 5, 3 * time.Second }
	rn := newRelayNode(t, net, nil, "r", relay.Serve, hold)
	a := newRelayNode(t, net, nil, "a", relay.Use, nil)
	b := newRelayNode(t, net, nil, "b", relay.Use, nil)
	all := []*relayNode{rn, a, b}
	relayRound(t, now, all, net) // a and b hear the relay
	now = now.Add(time.Second)
	a.serve("busy", 6)
	a.serve("sparse", 1)
	relayRound(t, now, all, net)
	now = now.Add(time.Second)
	relayRound(t, now, all, net) // the relay sums at its next report
	now = now.Add(time.Second)
	if b.got("busy") != 6 || b.got("sparse") != 0 {
		t.Fatalf("b applied busy %d, sparse %d: want 6 and 0 (held)", b.got("busy"), b.got("sparse"))
	}
	if st := rn.Stats().Relay.Sum; st.HeldTags != 1 || st.HeldHits != 1 || st.HotTags != 1 {
		t.Errorf("relay sums %+v: want the sparse tag held and the busy one hot", st)
	}
	// The hold age, then as long as a lost datagram may take to be
	// repaired, which the sender's ledger waits for.
	for range 8 + int(peer.RepairWithin(time.Second)/time.Second) {
		relayRound(t, now, all, net)
		now = now.Add(time.Second)
	}
	if st := rn.Stats().Relay.Sum; st.Dropped != 1 || st.HeldTags != 0 || b.got("sparse") != 0 {
		t.Errorf("relay sums %+v, b applied %d sparse: want the sparse hit dropped after its age", st, b.got("sparse"))
	}
	if st := a.Stats().Relay; st.OwnPending != 0 || st.OwnForgotten != 1 {
		t.Errorf("a's ledger %+v: want the dropped hit forgotten", st)
	}
}

// TestRelaySegments: two segments joined by their relays. A hit served in
// one is applied once on every node of the other; a cut link is logged
// and counted, each side keeps its own count, and healing resumes.
func TestRelaySegments(t *testing.T) {
	now := simT0
	segA, segB, link, a, b := twoSegments(t, &now, 4)
	all := append(slices.Clone(a), b...)
	const rounds = 5
	for range rounds {
		a[3].serve("t", 2)
		b[2].serve("t", 1)
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	for range 4 {
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	checkSegmentsApplied(t, all, a[3], b[2], rounds)
	if st := b[0].Stats().Relay; st.RemoteRelays != 2 || st.CrossingsReceived == 0 || st.CrossingPackets == 0 {
		t.Errorf("b0's relay stats %+v: want both of a's relays heard across", st)
	}
	var remote int
	for _, p := range b[1].Peers() {
		if p.Relay == peer.RelayOfRemote {
			remote++
		}
	}
	if remote != 2 {
		t.Errorf("b1's peers view shows %d remote relays, want 2", remote)
	}

	// Cut the link: each side counts its own hits only, and says so.
	link.Partition([]string{"a0", "a1"}, []string{"b0", "b1"})
	for range 5 {
		a[3].serve("cut", 1)
		b[2].serve("cut", 1)
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	relayRound(t, now, all, segA, segB, link)
	now = now.Add(time.Second)
	if got, st := b[3].got("cut"), b[0].Stats().Relay; got != 5 || st.RemoteSilences != 2 || st.RemoteRelays != 0 {
		t.Errorf("link cut: b3 applied %d (want 5, its side's), b0's stats %+v (want 2 remote silences)", got, st)
	}
	if !strings.Contains(b[0].log.String(), "relay of another segment went silent") {
		t.Errorf("b0 did not log the cut:\n%s", b[0].log.String())
	}
	link.Partition()
	for range 3 {
		a[3].serve("healed", 1)
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	relayRound(t, now, all, segA, segB, link)
	now = now.Add(time.Second)
	relayRound(t, now, all, segA, segB, link)
	if got := b[3].got("healed"); got != 3 {
		t.Errorf("after healing b3 applied %d of a3's 3 hits, want 3", got)
	}
	if !strings.Contains(b[0].log.String(), "relay of another segment heard") {
		t.Errorf("b0 did not log the link's return:\n%s", b[0].log.String())
	}
}

// TestRelayStopPassesAll: a relay that stops cleanly passes on the sums it
// held back, as a node's clean stop sends its last hits.
func TestRelayStopPassesAll(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 7}, func() time.Time { return now })
	hold := func(string) (uint32, time.Duration) { return 5, time.Hour }
	rn := newRelayNode(t, net, nil, "r", relay.Serve, hold)
	a := newRelayNode(t, net, nil, "a", relay.Use, nil)
	b := newRelayNode(t, net, nil, "b", relay.Use, nil)
	all := []*relayNode{rn, a, b}
	relayRound(t, now, all, net)
	now = now.Add(time.Second)
	a.serve("sparse", 2)
	relayRound(t, now, all, net)
	now = now.Add(time.Second)
	relayRound(t, now, all, net)
	if b.got("sparse") != 0 || rn.Stats().Relay.Sum.HeldHits != 2 {
		t.Fatalf("before the stop: b applied %d, the relay holds %d; want 0 and 2", b.got("sparse"), rn.Stats().Relay.Sum.HeldHits)
	}
	if err := rn.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	net.Deliver(now)
	b.receiveAll()
	if b.got("sparse") != 2 {
		t.Errorf("after the relay's stop b applied %d of the 2 held hits", b.got("sparse"))
	}
}

// twoSegments builds two segments of four nodes over in-memory networks
// on the clock *now (seeded from seed), the first two of each relays
// joined by a link, runs three rounds for every node to hear its relays,
// and clears what was applied.
func twoSegments(t *testing.T, now *time.Time, seed int64) (segA, segB, link *transport.MemNetwork, a, b []*relayNode) {
	t.Helper()
	clock := func() time.Time { return *now }
	segA, segB = transport.NewMemNetwork(transport.MemConfig{Seed: seed}, clock), transport.NewMemNetwork(transport.MemConfig{Seed: seed + 1}, clock)
	link = transport.NewMemNetwork(transport.MemConfig{Seed: seed + 2}, clock)
	for i := range 4 {
		mode, l := relay.Use, (*transport.MemNetwork)(nil)
		if i < 2 {
			mode, l = relay.Serve, link
		}
		a = append(a, newRelayNode(t, segA, l, fmt.Sprintf("a%d", i), mode, nil))
		b = append(b, newRelayNode(t, segB, l, fmt.Sprintf("b%d", i), mode, nil))
	}
	all := append(slices.Clone(a), b...)
	for range 3 {
		relayRound(t, *now, all, segA, segB, link)
		*now = now.Add(time.Second)
	}
	for _, n := range all {
		n.mu.Lock()
		clear(n.applied)
		n.mu.Unlock()
	}
	return segA, segB, link, a, b
}

// checkSegmentsApplied checks that every node of all applied the hits of
// t that one (a3, 1 a round) and two (b2, 2 a round) served over rounds,
// each once, and never its own.
func checkSegmentsApplied(t *testing.T, all []*relayNode, one, two *relayNode, rounds int) {
	t.Helper()
	for _, n := range all {
		want := uint32(3 * rounds)
		switch n {
		case one:
			want = uint32(rounds)
		case two:
			want = uint32(2 * rounds)
		}
		if got := n.got("t"); got != want {
			t.Errorf("%s applied %d hits of t, want %d", n.tr.Name(), got, want)
		}
	}
}
