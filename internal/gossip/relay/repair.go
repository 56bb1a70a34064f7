package relay

import (
	"cmp"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns the relayed streams' share of loss repair (package
// gossip's repair.go): what a relay finds missing from the hits nodes
// send it and the crossings other segments' relays send it, which it asks
// for again.

// Holes calls ask for each sender of a stream relayed to this node that
// is missing datagrams due to be asked for again (peer.Peer.Holes): the
// nodes of the segment for their hits (wire.StreamToRelay, asked over the
// node's transport), other segments' relays for their crossings
// (wire.StreamCrossing, asked over the link).
func (p *Part) Holes(now time.Time, hold time.Duration, ask func(t transport.Transport, to uint64, addr string, s wire.Stream, seqs []uint64)) {
	type due struct {
		to   uint64
		addr string
		s    wire.Stream
		seqs []uint64
	}
	var asks []due
	p.mu.Lock()
	for id, pr := range p.senders {
		if seqs := pr.Holes(nil, now, hold, 4*wire.MaxRepairSeqs); len(seqs) > 0 {
			asks = append(asks, due{id, pr.Info.Addr, wire.StreamToRelay, seqs})
		}
	}
	for id, pr := range p.remote {
		if seqs := pr.Holes(nil, now, hold, 4*wire.MaxRepairSeqs); len(seqs) > 0 {
			asks = append(asks, due{id, pr.Info.Addr, wire.StreamCrossing, seqs})
		}
	}
	link := p.link
	p.mu.Unlock()
	slices.SortFunc(asks, func(a, b due) int { return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.to, b.to)) }) // one order, whatever the ids
	for _, a := range asks {
		t := p.host.Transport()
		if a.s == wire.StreamCrossing {
			if link == nil {
				continue
			}
			t = link
		}
		ask(t, a.to, a.addr, a.s, a.seqs)
	}
}

// Heard reports whether addr is where a relayed stream comes from: a
// relay's peer whose repair requests it answers.
func (p *Part) Heard(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.senders {
		if pr.Info.Addr == addr {
			return true
		}
	}
	for _, pr := range p.remote {
		if pr.Info.Addr == addr {
			return true
		}
	}
	for _, r := range p.relays {
		if r.addr == addr {
			return true
		}
	}
	return false
}

// Repaired is how many datagrams of the streams relayed to this node
// arrived after it asked for them again.
func (p *Part) Repaired() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n uint64
	for _, pr := range p.senders {
		n += pr.Info.Repaired
	}
	for _, pr := range p.remote {
		n += pr.Info.Repaired
	}
	return n
}
