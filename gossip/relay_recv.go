package gossip

import (
	"time"

	"github.com/dthrottle/dthrottle/gossip/relay"
	"github.com/dthrottle/dthrottle/gossip/transport"
	"github.com/dthrottle/dthrottle/gossip/wire"
)

// This file owns what a node takes in of relaying (relay.go): relays'
// aggregates, hits for it to sum when it is a relay, other segments'
// crossings; and what it shows of it: relays gone silent, the peers
// view's relays, the counters.

// receiveAggregate applies a relay's aggregate, less this node's own hits
// it carries, and notes the relay as heard.
func (n *Node) receiveAggregate(msg wire.Message, p transport.Packet) {
	rs := &n.relay
	// The answers' lock first, as an export takes it before rs.mu: no
	// level is exported between the ledger's change and the answers
	// taking in the hits come back.
	n.snap.mu.Lock()
	rs.mu.Lock()
	r := rs.relays[msg.Node]
	if r == nil {
		if len(rs.relays) >= maxPeers {
			rs.mu.Unlock()
			n.snap.mu.Unlock()
			return
		}
		r = &relayHeard{}
		rs.relays[msg.Node] = r
		n.log.Info("relay heard", "peer", p.From, "node", nodeName(msg.Node))
	} else if r.silent {
		n.log.Info("relay heard again", "peer", p.From, "node", nodeName(msg.Node))
	}
	r.addr, r.last, r.silent = p.From, p.At, false
	delete(rs.remote, msg.Node) // a relay of this segment, not of another
	rs.stats.AggregatesReceived++
	rs.stats.AggregateBytesReceived += uint64(len(p.Data))
	mine, back := rs.own.Split(msg.Hits, nil, nil)
	rs.mu.Unlock()
	n.snap.reported(back)
	n.snap.mu.Unlock()
	if len(mine) > 0 {
		n.cfg.Apply(p.At, mine)
	}
}

// receiveRelayed takes a node's hits for this relay (type 6) or another
// segment's crossing (type 8), each checked against a replay window of
// its own stream. A node that does not serve applies them as they are.
func (n *Node) receiveRelayed(msg wire.Message, p transport.Packet) {
	rs := &n.relay
	now := p.At
	silent := n.silentAfter()
	rs.mu.Lock()
	table := rs.senders
	if msg.Type == wire.MsgCrossing {
		if _, ours := rs.relays[msg.Node]; ours {
			// A relay of this segment: its hits reach this node in its
			// aggregates already.
			rs.stats.CrossingsOwnSegment++
			rs.mu.Unlock()
			return
		}
		table = rs.remote
	}
	pr, isNew := peerFor(table, msg.Node, p)
	if !pr.accept(msg.Seq) {
		rs.mu.Unlock()
		n.mu.Lock()
		n.stats.DroppedDuplicate++
		n.mu.Unlock()
		return
	}
	pr.info.Packets++
	pr.info.Addr, pr.info.LastHeard = p.From, p.At
	wasSilent := pr.info.Silent
	pr.info.Silent = false
	var apply []Hit
	switch {
	case rs.sum == nil:
		apply = msg.Hits
	case msg.Type == wire.MsgToRelay:
		rs.stats.ToRelayReceived++
		rs.stats.ToRelayBytesReceived += uint64(len(p.Data))
		rs.sum.AddCapped(now, msg.Hits)
	default:
		rs.stats.CrossingsReceived++
		rs.stats.CrossingBytesReceived += uint64(len(p.Data))
		var buf [8]liveRelay
		live := rs.live(now, n.id, silent, buf[:0])
		for _, h := range msg.Hits {
			if !live[relay.Pick(h.Key, len(live))].self {
				continue // another relay of this segment passes it on
			}
			if _, ok := rs.foreign[h.Key]; ok || len(rs.foreign) < relay.MaxLedger {
				rs.foreign[h.Key] += h.Count
			}
		}
	}
	for _, h := range msg.Hits {
		pr.info.Hits += uint64(h.Count)
	}
	rs.mu.Unlock()
	n.mu.Lock()
	n.stats.PacketsReceived++
	n.stats.BytesReceived += uint64(len(p.Data))
	n.stats.TagsReceived += uint64(len(msg.Hits))
	n.mu.Unlock()
	if msg.Type == wire.MsgCrossing && (isNew || wasSilent) {
		n.log.Info("relay of another segment heard", "peer", p.From, "node", nodeName(msg.Node), "again", wasSilent)
	}
	if len(apply) > 0 {
		n.cfg.Apply(now, apply)
	}
}

// checkRelays notes the relays gone silent: this segment's (the node then
// sends their tags elsewhere) and other segments' (their hits no longer
// arrive: each side keeps its own rate), logged once each, and forgets
// those silent for a hundred times as long.
func (n *Node) checkRelays(now time.Time) {
	rs := &n.relay
	silent := n.silentAfter()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, r := range rs.relays {
		quiet := now.Sub(r.last)
		if quiet > 100*silent {
			delete(rs.relays, id)
		} else if quiet > silent && !r.silent {
			r.silent = true
			n.log.Warn("relay went silent: its tags go to the other relays, or to every peer", "peer", r.addr, "node", nodeName(id))
		}
	}
	expire := func(table map[uint64]*peer, remote bool) {
		for id, pr := range table {
			quiet := now.Sub(pr.info.LastHeard)
			if quiet > 100*silent {
				delete(table, id)
			} else if quiet > silent && !pr.info.Silent {
				pr.info.Silent = true
				if remote {
					rs.stats.RemoteSilences++
					n.log.Warn("relay of another segment went silent: each segment holds its own rate until it is heard again",
						"peer", pr.info.Addr, "node", nodeName(id))
				}
			}
		}
	}
	expire(rs.remote, true)
	expire(rs.senders, false)
}

// relayPeers marks, in the peers view, this segment's relays, and adds
// the relays of other segments.
func (n *Node) relayPeers(out []PeerInfo) []PeerInfo {
	rs := &n.relay
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i := range out {
		if _, ok := rs.relays[out[i].Node]; ok {
			out[i].Relay = RelayOfSegment
		}
	}
	for _, p := range sortedPeers(rs.remote) {
		p.Relay = RelayOfRemote
		out = append(out, p)
	}
	return out
}

// relayStats returns the relaying counters at now.
func (n *Node) relayStats(now time.Time) RelayNodeStats {
	rs := &n.relay
	silent := n.silentAfter()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := rs.stats
	st.Mode = rs.cfg.Mode.String()
	for _, r := range rs.relays {
		if now.Sub(r.last) <= silent {
			st.Relays++
		}
	}
	for _, p := range rs.remote {
		if now.Sub(p.info.LastHeard) <= silent {
			st.RemoteRelays++
		}
		st.CrossingsLost += p.info.Lost
	}
	st.OwnPending = rs.own.Len()
	if rs.sum != nil {
		st.Sum = rs.sum.Stats()
	}
	return st
}
