package relay

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns what a Part takes in: relays' aggregates, hits for it to
// sum when it is a relay, other segments' crossings; and what it shows:
// relays gone silent, the peers view's relays, the counters.

// ReceiveAggregate applies a relay's aggregate, which the node accepted
// in its own sequence, less this node's own hits it carries, and notes
// the relay as heard.
func (p *Part) ReceiveAggregate(msg wire.Message, pkt transport.Packet) {
	// The host's lock first, as an export takes it before mu: no level is
	// exported between the ledger's change and warm start taking in the
	// hits come back.
	p.host.Lock()
	p.mu.Lock()
	r := p.relays[msg.Node]
	if r == nil {
		if len(p.relays) >= peer.Max {
			p.mu.Unlock()
			p.host.Unlock()
			return
		}
		r = &heard{}
		p.relays[msg.Node] = r
		p.log.Info("relay heard", "peer", pkt.From, "node", peer.Name(msg.Node))
	} else if r.silent {
		p.log.Info("relay heard again", "peer", pkt.From, "node", peer.Name(msg.Node))
	}
	r.addr, r.last, r.silent = pkt.From, pkt.At, false
	delete(p.remote, msg.Node) // a relay of this segment, not of another
	p.stats.AggregatesReceived++
	p.stats.AggregateBytesReceived += uint64(len(pkt.Data))
	mine, back := p.own.Split(msg.Hits, nil, nil)
	p.mu.Unlock()
	p.host.Known(back)
	p.host.Unlock()
	if len(mine) > 0 {
		p.host.Apply(pkt.At, mine)
	}
}

// ReceiveRelayed takes a node's hits for this relay (type 6) or another
// segment's crossing (type 8), each checked against a replay window of
// its own stream. A node that does not serve applies them as they are.
func (p *Part) ReceiveRelayed(msg wire.Message, pkt transport.Packet) {
	now := pkt.At
	self, silent := p.host.ID(), p.host.SilentAfter()
	p.mu.Lock()
	table := p.senders
	if msg.Type == wire.MsgCrossing {
		if _, ours := p.relays[msg.Node]; ours {
			// A relay of this segment: its hits reach this node in its
			// aggregates already.
			p.stats.CrossingsOwnSegment++
			p.mu.Unlock()
			return
		}
		table = p.remote
	}
	pr, isNew := table.For(msg.Node, pkt.From, pkt.At)
	// A node's hits for this relay go only in intervals that have some,
	// and the next one: a silence of that stream is no split (the node
	// sends to every peer itself after a silence of the relay's), and its
	// gaps are asked for whatever came between.
	split := !isNew && msg.Type == wire.MsgCrossing && peer.Split(pr.Info.LastHeard, pkt.At, silent)
	if !pr.Accept(msg.Seq, pkt.At) {
		p.mu.Unlock()
		p.host.CountDuplicate()
		return
	}
	pr.Info.Packets++
	pr.Info.Addr, pr.Info.LastHeard = pkt.From, pkt.At
	wasSilent := pr.Info.Silent
	pr.Info.Silent = false
	if split {
		pr.ForgetHoles() // a split's, not a loss (package gossip's repair.go)
	}
	var apply []Hit
	switch {
	case p.sum == nil:
		apply = msg.Hits
	case msg.Type == wire.MsgToRelay:
		p.stats.ToRelayReceived++
		p.stats.ToRelayBytesReceived += uint64(len(pkt.Data))
		p.sum.AddCapped(now, msg.Hits)
	default:
		p.stats.CrossingsReceived++
		p.stats.CrossingBytesReceived += uint64(len(pkt.Data))
		var buf [8]live
		relays := p.live(now, self, silent, buf[:0])
		for _, h := range msg.Hits {
			if !relays[Pick(h.Key, len(relays))].self {
				continue // another relay of this segment passes it on
			}
			if _, ok := p.foreign[h.Key]; ok || len(p.foreign) < MaxLedger {
				p.foreign[h.Key] += h.Count
			}
		}
	}
	for _, h := range msg.Hits {
		pr.Info.Hits += uint64(h.Count)
	}
	p.mu.Unlock()
	p.host.CountReceived(len(pkt.Data), len(msg.Hits))
	if msg.Type == wire.MsgCrossing && (isNew || wasSilent) {
		p.log.Info("relay of another segment heard", "peer", pkt.From, "node", peer.Name(msg.Node), "again", wasSilent)
	}
	if len(apply) > 0 {
		p.host.Apply(now, apply)
	}
}

// Check notes the relays gone silent at now: this segment's (the node
// then sends their tags elsewhere) and other segments' (their hits no
// longer arrive: each side keeps its own rate), logged once each, and
// forgets those silent for a hundred times as long.
func (p *Part) Check(now time.Time) {
	silent := p.host.SilentAfter()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.relays {
		quiet := now.Sub(r.last)
		if quiet > 100*silent {
			delete(p.relays, id)
		} else if quiet > silent && !r.silent {
			r.silent = true
			p.log.Warn("relay went silent: its tags go to the other relays, or to every peer", "peer", r.addr, "node", peer.Name(id))
		}
	}
	expire := func(table peer.Table, remote bool) {
		for id, pr := range table {
			quiet := now.Sub(pr.Info.LastHeard)
			if quiet > 100*silent {
				delete(table, id)
			} else if quiet > silent && !pr.Info.Silent {
				pr.Info.Silent = true
				if remote {
					p.stats.RemoteSilences++
					p.log.Warn("relay of another segment went silent: each segment holds its own rate until it is heard again",
						"peer", pr.Info.Addr, "node", peer.Name(id))
				}
			}
		}
	}
	expire(p.remote, true)
	expire(p.senders, false)
}

// MarkPeers marks, in the peers view, this segment's relays, and adds the
// relays of other segments.
func (p *Part) MarkPeers(out []peer.Info) []peer.Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range out {
		if _, ok := p.relays[out[i].Node]; ok {
			out[i].Relay = peer.RelayOfSegment
		}
	}
	for _, info := range p.remote.Sorted() {
		info.Relay = peer.RelayOfRemote
		out = append(out, info)
	}
	return out
}

// Stats returns the relaying counters at now.
func (p *Part) Stats(now time.Time) NodeStats {
	silent := p.host.SilentAfter()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Mode = p.cfg.Mode.String()
	for _, r := range p.relays {
		if now.Sub(r.last) <= silent {
			st.Relays++
		}
	}
	for _, pr := range p.remote {
		if now.Sub(pr.Info.LastHeard) <= silent {
			st.RemoteRelays++
		}
		st.CrossingsLost += pr.Info.Lost
	}
	st.OwnPending = p.own.Len()
	if p.sum != nil {
		st.Sum = p.sum.Stats()
	}
	return st
}
