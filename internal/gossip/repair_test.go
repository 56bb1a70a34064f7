package gossip

import (
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// spendAll charges hits to a tag of its own on every node of s, reports
// each and delivers, for rounds intervals, then lets the last reports
// arrive.
func (s *sim) spendAll(rounds int, interval time.Duration) {
	for range rounds {
		s.advanceTo(s.now.Add(interval / 2).Sub(simT0))
		s.deliver()
		s.advanceTo(s.now.Add(interval / 2).Sub(simT0))
		for i, sn := range s.nodes {
			sn.table.Charge(s.now, []byte("tag"+sn.name), uint32(1+i))
			s.report(i)
		}
		s.deliver()
	}
	s.advanceTo(s.now.Add(interval / 2).Sub(simT0))
	s.deliver()
}

// heartbeats has every node of s report nothing for rounds intervals:
// each receiver starts its window of each sender, from which it repairs.
func (s *sim) heartbeats(rounds int, interval time.Duration) {
	for range rounds {
		s.advanceTo(s.now.Add(interval).Sub(simT0))
		for i := range s.nodes {
			s.report(i)
		}
		s.deliver()
	}
}

// exact reports whether every node applied every hit its peers sent, and
// no more.
func (s *sim) exact(t *testing.T) bool {
	t.Helper()
	return s.missing(t) == 0
}

// missing is the share of its peers' hits the nodes did not apply; a hit
// applied twice fails t.
func (s *sim) missing(t *testing.T) float64 {
	t.Helper()
	var sent, want, applied uint64
	for _, sn := range s.nodes {
		sent += sn.sent
	}
	for _, sn := range s.nodes {
		want += sent - sn.sent
		applied += min(sn.applied, sent-sn.sent)
		if w := sent - sn.sent; sn.applied != w {
			t.Logf("%s applied %d of its peers' %d hits", sn.name, sn.applied, w)
		}
		if sn.applied > sent-sn.sent {
			t.Errorf("%s applied %d hits, more than its peers sent (%d): a hit counted twice", sn.name, sn.applied, sent-sn.sent)
		}
	}
	return 1 - float64(applied)/float64(want)
}

// Datagrams lost, duplicated and reordered arrive once each after
// repair: every node applies exactly the hits its peers sent, a resend
// crossing a late original or a duplicate counted once.
func TestRepairEveryHitOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		mc   transport.MemConfig
		lost float64 // the most of the hits left missing, and of the datagrams
	}{
		{"20% loss", transport.MemConfig{Loss: 0.2, Delay: 20 * time.Millisecond, Seed: 1}, 0},
		// Each ask and its answer get through with 1/4 chance: a datagram
		// stays lost with (3/4)^MaxAsks, 3%.
		{"50% loss", transport.MemConfig{Loss: 0.5, Delay: 20 * time.Millisecond, Seed: 2}, 0.06},
		{"loss, duplicates, reordering", transport.MemConfig{Loss: 0.3, Duplicate: 0.3, Delay: 20 * time.Millisecond, Jitter: 1500 * time.Millisecond, Seed: 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 4, bucket.Policy{Rate: 1, Burst: 1000}, time.Second, transport.MemConfig{Delay: 20 * time.Millisecond})
			s.heartbeats(2, time.Second)
			s.net.SetConfig(tc.mc)
			for _, sn := range s.nodes {
				// Longer than the longest run of losses here: a silence of
				// the timeout is a split's, not repaired (TestRepairNotAcrossSplit).
				sn.node.cfg.SilentAfter = 10 * time.Second
			}
			s.spendAll(60, time.Second)
			// Then a clean network, for the repairs of the last losses.
			s.net.SetConfig(transport.MemConfig{Delay: 20 * time.Millisecond})
			s.spendAll(2*peerMaxAsks, time.Second)
			if m := s.missing(t); m > tc.lost {
				t.Errorf("%.1f%% of the hits missing after repair, want at most %.0f%%", 100*m, 100*tc.lost)
			}
			var st RepairStats
			var dup, lost, received uint64
			for _, sn := range s.nodes {
				x := sn.node.Stats()
				st.Repaired += x.Repair.Repaired
				st.Resent += x.Repair.Resent
				dup += x.DroppedDuplicate
				lost += x.Lost
				received += x.PacketsReceived
			}
			if float64(lost) > tc.lost*float64(received) {
				t.Errorf("%d datagrams still counted lost of %d received", lost, received)
			}
			if st.Repaired == 0 || st.Resent < st.Repaired {
				t.Errorf("repaired %d, resent %d: want some, each repaired datagram resent", st.Repaired, st.Resent)
			}
			t.Logf("repaired %d datagrams, resent %d, duplicates dropped %d", st.Repaired, st.Resent, dup)
		})
	}
}

// peerMaxAsks is peer.MaxAsks, as the rounds a repair may take.
const peerMaxAsks = 12

// A request heard on multicast is answered once to everyone, however many
// ask; one on a unicast socket from an address no peer is heard from is
// refused.
func TestRepairSuppressedAndRefused(t *testing.T) {
	s := newSim(t, 5, bucket.Policy{Rate: 1, Burst: 1000}, time.Second, transport.MemConfig{Delay: 10 * time.Millisecond})
	s.spendAll(2, time.Second)
	sender := s.nodes[0].node
	seq := sender.enc.Seq() // a datagram every peer has
	ask := func(from int, unicast bool, addr string) {
		var enc wire.Encoder
		enc.Node, enc.MaxPacket = s.nodes[from].node.ID(), 1400
		if err := enc.EncodeRepair(s.now, wire.Repair{To: sender.ID(), Stream: wire.StreamOwn, Seqs: []uint64{seq}}, func(pkt []byte) error {
			sender.Receive(transport.Packet{Data: append([]byte(nil), pkt...), From: addr, At: s.now, Unicast: unicast})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 5; i++ {
		ask(i, false, s.nodes[i].name)
	}
	st := sender.Stats().Repair
	if st.Resent != 1 || st.Suppressed != 3 {
		t.Errorf("four asks on multicast: resent %d, suppressed %d; want 1 and 3", st.Resent, st.Suppressed)
	}
	ask(1, true, "192.0.2.9:7946")
	if st := sender.Stats().Repair; st.Refused != 1 || st.Resent != 1 {
		t.Errorf("an ask from an unknown address: refused %d, resent %d; want 1 and 1", st.Refused, st.Resent)
	}
	s.advanceTo(s.now.Add(keepIntervals * 2 * time.Second).Sub(simT0))
	ask(1, false, s.nodes[1].name)
	if st := sender.Stats().Repair; st.Gone != 1 {
		t.Errorf("an ask past the keeping time: gone %d, want 1", st.Gone)
	}
	s.deliver()
	if !s.exact(t) {
		t.Error("resends counted twice")
	}
}

// The sent log holds at most keepDatagrams datagrams and about keepBytes.
func TestSentLogBounds(t *testing.T) {
	var l sentLog
	var enc wire.Encoder
	enc.Node, enc.MaxPacket = 1, wire.MaxPacket
	now := simT0
	big := make([]Hit, 1)
	big[0] = Hit{Key: string(make([]byte, 60000)), Count: 1}
	for range 3 * keepDatagrams {
		if _, err := enc.Encode(now, big, func(pkt []byte) error {
			l.keep(streamKey{}, pkt, now)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if l.bytes > keepBytes || l.count > keepBytes/60000+1 {
		t.Errorf("kept %d datagrams of %d bytes: over %d bytes", l.count, l.bytes, keepBytes)
	}
	held := 0
	for _, d := range l.ring {
		held += cap(d.pkt)
	}
	if held > keepBytes+keepDatagrams*2048+2*wire.MaxPacket {
		t.Errorf("the slots hold %d bytes", held)
	}
	for range 3 * keepDatagrams {
		if _, err := enc.Encode(now, []Hit{{Key: "a", Count: 1}}, func(pkt []byte) error {
			l.keep(streamKey{}, pkt, now)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if l.count != keepDatagrams || len(l.index) != keepDatagrams {
		t.Errorf("kept %d datagrams, indexed %d; want %d", l.count, len(l.index), keepDatagrams)
	}
	if _, ok := l.find(streamKey{}, enc.Seq(), now, time.Second, false); !ok {
		t.Error("the last datagram is not kept")
	}
	if _, ok := l.find(streamKey{}, enc.Seq()-keepDatagrams, now, time.Second, false); ok {
		t.Error("a datagram past the bound is kept")
	}
}

// The datagrams of a silence as long as the silence timeout are a split's:
// they are not asked for again when the peer is heard once more, so a
// healed split does not charge each part with the other's hits.
func TestRepairNotAcrossSplit(t *testing.T) {
	s := newSim(t, 4, bucket.Policy{Rate: 1, Burst: 1000}, time.Second, transport.MemConfig{Delay: 10 * time.Millisecond})
	s.spendAll(3, time.Second)
	s.net.Partition([]string{"n0", "n1"}, []string{"n2", "n3"})
	s.spendAll(10, time.Second)
	s.net.Partition()
	s.spendAll(2*peerMaxAsks, time.Second)
	var asked uint64
	for _, sn := range s.nodes {
		asked += sn.node.Stats().Repair.Asked
	}
	if asked != 0 {
		t.Errorf("%d datagrams of a split asked for again", asked)
	}
	// A shorter gap is a loss, and repaired.
	s.net.Partition([]string{"n0", "n1"}, []string{"n2", "n3"})
	s.spendAll(1, time.Second)
	s.net.Partition()
	s.spendAll(2*peerMaxAsks, time.Second)
	var repaired uint64
	for _, sn := range s.nodes {
		repaired += sn.node.Stats().Repair.Repaired
	}
	if repaired == 0 {
		t.Error("a gap shorter than the silence timeout not repaired")
	}
}

// Through relays, with loss on the segments and the link: the hits for a
// relay, the aggregates and the crossings lost are repaired, and every
// node applies every other node's hits exactly once (its own never).
func TestRepairThroughRelays(t *testing.T) {
	now := simT0
	segA, segB, link, a, b := twoSegments(t, &now, 14)
	all := append(slices.Clone(a), b...)
	lossy := transport.MemConfig{Loss: 0.2, Seed: 17}
	for _, net := range []*transport.MemNetwork{segA, segB, link} {
		net.SetConfig(lossy)
	}
	const rounds = 30
	for range rounds {
		a[3].serve("t", 2)
		b[2].serve("t", 1)
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	for _, net := range []*transport.MemNetwork{segA, segB, link} {
		net.SetConfig(transport.MemConfig{})
	}
	for range 2 * peerMaxAsks {
		relayRound(t, now, all, segA, segB, link)
		now = now.Add(time.Second)
	}
	checkSegmentsApplied(t, all, a[3], b[2], rounds)
	var st RepairStats
	for _, n := range all {
		x := n.Stats().Repair
		st.Repaired += x.Repaired
		st.Resent += x.Resent
	}
	if st.Repaired == 0 {
		t.Error("nothing repaired at 20% loss")
	}
	t.Logf("repaired %d datagrams, resent %d", st.Repaired, st.Resent)
}
