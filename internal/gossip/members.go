package gossip

import (
	"slices"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns membership: who this node counts in its cluster now,
// which of them are missing, and the share of the rate that makes its
// connected part hold its own part of the cluster's rate while the
// cluster is split (the "share" partition policy: docs/design.md, "The
// cluster bound"). The node only says who is missing and what its share
// is (Config.Members); what the share scales is its owner's.
//
// A peer is live while heard within the silence timeout. One silent for
// longer is missing until it is forgotten, ForgetAfter after it was last
// heard, or until it says goodbye (wire.MsgGoodbye, sent by Stop), when it
// stops counting at once. A peer that reports through relays
// (Info.Relayed) is silent by design: it counts as live while a relay of
// this segment is heard, as missing otherwise. Relays of other segments
// are not counted: a segment's share is of the nodes it hears.

// Members is who a node counts in its cluster at one instant. A plain
// value; the zero Members counts no peer, and its Share of 0 stands for 1.
type Members struct {
	Live    int      // peers heard within the silence timeout, and nodes behind a relay heard
	Missing []uint64 // peers silent, neither gone nor forgotten, by id
	Left    int      // peers that said goodbye, not yet forgotten
	// Share is (1 + Live) / (1 + Live + len(Missing)): the part of the
	// cluster this node and the peers it hears were before the split. 1
	// when nothing is missing.
	Share float64
}

// same reports whether m and o count the same peers.
func (m Members) same(o Members) bool {
	return m.Live == o.Live && m.Left == o.Left && slices.Equal(m.Missing, o.Missing)
}

// members is a node's membership state.
type members struct {
	mu   sync.Mutex // one check at a time: the callback sees changes in order
	last Members    // as last handed to Config.Members; guarded by mu
	// forgetAfter is Config.ForgetAfter; guarded by the node's mu.
	forgetAfter time.Duration
}

// SetForgetAfter changes how long a silent peer stays missing before it
// is forgotten, from the next check on (a reload). d <= 0 changes
// nothing.
func (n *Node) SetForgetAfter(d time.Duration) {
	if d <= 0 {
		return
	}
	n.mu.Lock()
	n.members.forgetAfter = d
	n.mu.Unlock()
}

// Members returns the membership as last checked: the one Config.Members
// was last given.
func (n *Node) Members() Members {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	m := n.members.last
	m.Missing = slices.Clone(m.Missing)
	if m.Share == 0 {
		m.Share = 1
	}
	return m
}

// membersAt counts the peers at now.
func (n *Node) membersAt(now time.Time) Members {
	n.mu.Lock()
	infos := n.peers.Sorted()
	silent, forget := n.cfg.SilentAfter, n.members.forgetAfter
	n.mu.Unlock()
	infos = n.relay.MarkPeers(infos)
	relayHeard := false
	for _, p := range infos {
		if p.Relay == peer.RelayOfSegment && now.Sub(p.LastHeard) <= silent {
			relayHeard = true
		}
	}
	var m Members
	for _, p := range infos {
		quiet := now.Sub(p.LastHeard)
		switch {
		case p.Relay == peer.RelayOfRemote || quiet > forget:
		case p.Left:
			m.Left++
		case quiet <= silent || (p.Relayed && relayHeard):
			m.Live++
		default:
			m.Missing = append(m.Missing, p.Node)
		}
	}
	m.Share = float64(1+m.Live) / float64(1+m.Live+len(m.Missing))
	return m
}

// checkMembers counts the peers at now and, when that changed who is
// live, missing or gone, logs it and hands it to Config.Members. The
// running loop calls it after every report; a goodbye calls it at once,
// and so does a peer joining or heard again while peers are missing.
func (n *Node) checkMembers(now time.Time) {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	m := n.membersAt(now)
	prev := n.members.last
	if m.same(prev) {
		return
	}
	n.members.last = m
	switch {
	case len(m.Missing) > 0 && len(m.Missing) != len(prev.Missing):
		n.log.Warn("peers missing (a split, or nodes gone without a goodbye): policies under partition \"share\" hold this node's share of the rate",
			"missing", len(m.Missing), "live", m.Live, "share", m.Share)
	case len(m.Missing) == 0 && len(prev.Missing) > 0:
		n.log.Info("cluster whole again: no peer missing", "live", m.Live, "share", m.Share)
	}
	if f := n.cfg.Members; f != nil {
		f(m)
	}
}

// heardMember takes in what an accepted datagram says of membership: a
// goodbye marks its sender gone and changes the count at once; so does a
// new peer, or one heard again after its silence, while peers are
// missing (otherwise the share stays 1 and the next check counts it, so
// a flood of new node ids costs no count each).
func (n *Node) heardMember(msg wire.Message, at time.Time, changed bool) {
	if msg.Type == wire.MsgGoodbye {
		n.mu.Lock()
		if pr := n.peers[msg.Node]; pr != nil {
			pr.Info.Left = true
		}
		n.mu.Unlock()
		n.log.Info("peer said goodbye", "node", peer.Name(msg.Node))
		n.checkMembers(at)
		return
	}
	if changed {
		n.members.mu.Lock()
		split := len(n.members.last.Missing) > 0
		n.members.mu.Unlock()
		if split {
			n.checkMembers(at)
		}
	}
}

// markMembers fills in the membership view of each peer in out: missing
// or not, and how far behind its hits are.
func (n *Node) markMembers(out []PeerInfo) []PeerInfo {
	n.mu.Lock()
	interval := n.cfg.Interval
	n.mu.Unlock()
	n.members.mu.Lock()
	missing := n.members.last.Missing
	n.members.mu.Unlock()
	for i := range out {
		out[i].Missing = slices.Contains(missing, out[i].Node)
		if out[i].Packets > 0 {
			out[i].Behind = out[i].Delay + interval
		}
	}
	return out
}

// sayGoodbye sends a goodbye to every peer: the last datagram of a clean
// stop, so that they stop counting this node at once.
func (n *Node) sayGoodbye(now time.Time) error {
	n.reportMu.Lock()
	defer n.reportMu.Unlock()
	n.configure(&n.enc)
	var bytes uint64
	err := n.enc.EncodeGoodbye(now, func(pkt []byte) error {
		bytes = uint64(len(pkt))
		return n.transport.Send(pkt)
	})
	if err != nil {
		n.countSent(0, 0, 0, true)
		return err
	}
	n.countSent(1, bytes, 0, false)
	return nil
}

// membersCollector reads the membership at each scrape:
//
//	dthrottle_gossip_share                     gauge, this node's share of the rate
//	dthrottle_gossip_peers_missing             gauge, peers silent, neither gone nor forgotten
//	dthrottle_gossip_peer_behind_seconds{node} gauge, per peer heard and not silent: its last
//	                                           datagram's delay plus an interval
func (n *Node) membersCollector() *metric.Collector {
	var (
		share   = metric.Gauge("gossip_share", "This node's share of the cluster's rate: (1 + live peers) / (1 + live + missing); policies under partition \"share\" hold it.")
		missing = metric.Gauge("gossip_peers_missing", "Peers silent for the silence timeout that neither said goodbye nor were forgotten.")
		behind  = metric.Gauge("gossip_peer_behind_seconds", "How far a peer's hits can be behind when applied here: its last datagram's arrival less its send time, plus one interval a hit may wait for its report.", "node")
	)
	return metric.NewCollector([]metric.Family{share, missing, behind}, func(emit metric.Emit) {
		m := n.Members()
		emit(share, m.Share)
		emit(missing, float64(len(m.Missing)))
		for _, p := range n.Peers() {
			if !p.Silent && p.Relay != peer.RelayOfRemote && p.Packets > 0 {
				emit(behind, p.Behind.Seconds(), peer.Name(p.Node))
			}
		}
	})
}
