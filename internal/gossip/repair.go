package gossip

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns loss repair. A sender keeps the datagrams it sent
// recently (sentLog); a receiver that sees numbers missing from a sender's
// sequence asks for them again (a MsgRepair, at its first report a quarter
// interval after it noticed the gap, a grace for datagrams merely late),
// once a report, up to peer.MaxAsks times, and the sender
// sends those it still keeps, byte for byte as it first sent them. A
// resent datagram is the original: its sequence number is the one the
// receiver's window is missing, so it is applied once, and a resend that
// crosses a late original, or a second resend, is a duplicate the window
// drops. docs/design.md ("Lost reports are repaired") states the bounds.
//
// Each of a sender's sequences is repaired: its own (every datagram it
// sends to all its peers, on multicast, to unicast peers, a relay's
// aggregates), its hits for each relay, and a relay's crossings to other
// segments. A request heard on multicast is answered on multicast, each
// datagram at most once per resendEvery however many ask; one heard on a
// unicast socket is answered to the asker alone, and only to an address
// the node hears its peers from, so that a forged source cannot turn the
// node on someone else.

// Bounds of the sent log: the datagrams kept, their bytes, and for how
// many intervals. A receiver asks for a missing datagram from a quarter
// interval after it noticed the gap, once an interval, at most
// peer.MaxAsks times (peer.RepairWithin): keepIntervals covers that with
// room for the delay.
const (
	keepDatagrams = 2048
	keepBytes     = 4 << 20
	keepIntervals = 16
	keepAtLeast   = 10 * time.Second // for short intervals, and a busy receiver
)

// streamKey names one of this node's sequences: wire.StreamToRelay is one
// per relay, named by its node id.
type streamKey struct {
	stream wire.Stream
	to     uint64
}

type sentKey struct {
	streamKey
	seq uint64
}

// sentDatagram is a datagram kept for repair.
type sentDatagram struct {
	key    sentKey
	at     time.Time // when it was first sent
	resent time.Time // when last sent again to every peer
	pkt    []byte    // its bytes; the slot's buffer, reused
}

// sentLog keeps the datagrams a node sent in the last keepIntervals, at
// most keepDatagrams of them and keepBytes of their bytes, oldest out
// first. Safe for concurrent use.
type sentLog struct {
	mu    sync.Mutex
	ring  []sentDatagram // keepDatagrams slots, made at the first keep
	head  int            // the oldest datagram's slot
	count int            // datagrams kept
	bytes int            // of the datagrams kept
	index map[sentKey]int
}

// keep records pkt, which this node just sent in stream s. Datagrams of
// another format, or of a repair request, are not kept.
func (l *sentLog) keep(s streamKey, pkt []byte, now time.Time) {
	t, _, seq, ok := wire.PeekSeq(pkt)
	if !ok || t == wire.MsgRepair {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ring == nil {
		l.ring, l.index = make([]sentDatagram, keepDatagrams), make(map[sentKey]int)
	}
	for l.count > 0 && (l.count == len(l.ring) || l.bytes+len(pkt) > keepBytes) {
		l.evict()
	}
	i := (l.head + l.count) % len(l.ring)
	d := &l.ring[i]
	d.key, d.at, d.resent = sentKey{s, seq}, now, time.Time{}
	d.pkt = append(d.pkt[:0], pkt...)
	l.count++
	l.bytes += len(pkt)
	l.index[d.key] = i
}

// evict forgets the oldest datagram. Its slot keeps a small buffer for
// reuse; a large one goes, so that the slots hold about keepBytes.
func (l *sentLog) evict() {
	d := &l.ring[l.head]
	if l.index[d.key] == l.head {
		delete(l.index, d.key)
	}
	l.bytes -= len(d.pkt)
	d.pkt = d.pkt[:0]
	if cap(d.pkt) > 2048 {
		d.pkt = nil
	}
	l.head = (l.head + 1) % len(l.ring)
	l.count--
}

// find returns a copy of the datagram seq of stream s if it is still
// kept at now, and whether it may go to every peer again (it did not
// within resendEvery); the resend is recorded when toAll.
func (l *sentLog) find(s streamKey, seq uint64, now time.Time, every time.Duration, toAll bool) (pkt []byte, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, kept := l.index[sentKey{s, seq}]
	if !kept {
		return nil, false
	}
	d := &l.ring[i]
	if now.Sub(d.at) > max(keepIntervals*every, keepAtLeast) {
		return nil, false
	}
	if toAll {
		if !d.resent.IsZero() && now.Sub(d.resent) < every/2 {
			return nil, true // sent again to all just now: suppressed
		}
		d.resent = now
	}
	return append([]byte(nil), d.pkt...), true
}

// RepairStats count a node's loss repair.
type RepairStats struct {
	Asked      uint64 `json:"asked"`      // numbers asked for again, over all askings
	Requests   uint64 `json:"requests"`   // repair requests sent
	Repaired   uint64 `json:"repaired"`   // datagrams that arrived after being asked for
	Resent     uint64 `json:"resent"`     // datagrams sent again
	Suppressed uint64 `json:"suppressed"` // asked for on multicast just after being sent again
	Gone       uint64 `json:"gone"`       // asked for, no longer kept: lost for good
	Refused    uint64 `json:"refused"`    // unicast requests from an address no peer is heard from
}

// sendOwn returns what sends a datagram encoded at now with the node's
// own encoder: to every peer, kept for repair.
func (n *Node) sendOwn(now time.Time) func(pkt []byte) error {
	return func(pkt []byte) error {
		n.sent.keep(streamKey{stream: wire.StreamOwn}, pkt, now)
		return n.transport.Send(pkt)
	}
}

// askRepairs asks every sender for the datagrams missing from its
// sequences that are due (peer.Peer.Holes): its own, and on a relay those
// relayed to it. Called from the report, which holds reportMu.
func (n *Node) askRepairs(now time.Time) {
	n.mu.Lock()
	hold := n.cfg.Interval / 4
	type ask struct {
		to   uint64
		addr string
		seqs []uint64
	}
	var asks []ask
	for id, pr := range n.peers {
		if seqs := pr.Holes(nil, now, hold, 4*wire.MaxRepairSeqs); len(seqs) > 0 {
			asks = append(asks, ask{id, pr.Info.Addr, seqs})
		}
	}
	n.mu.Unlock()
	slices.SortFunc(asks, func(a, b ask) int { return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.to, b.to)) }) // one order, whatever the ids
	for _, a := range asks {
		n.askRepair(now, n.transport, a.to, a.addr, wire.StreamOwn, a.seqs)
	}
	n.relay.Holes(now, hold, func(link transport.Transport, to uint64, addr string, s wire.Stream, seqs []uint64) {
		n.askRepair(now, link, to, addr, s, seqs)
	})
}

// askRepair sends a repair request over t to the sender at addr, or to
// every peer when t cannot send to one.
func (n *Node) askRepair(now time.Time, t transport.Transport, to uint64, addr string, s wire.Stream, seqs []uint64) {
	n.configure(&n.repairEnc)
	n.repairEnc.Node = n.id
	var packets, bytes uint64
	err := n.repairEnc.EncodeRepair(now, wire.Repair{To: to, Stream: s, Seqs: seqs}, func(pkt []byte) error {
		packets++
		bytes += uint64(len(pkt))
		if u, ok := t.(transport.Unicaster); ok && addr != "" {
			return u.SendTo(pkt, addr)
		}
		return t.Send(pkt)
	})
	n.countSent(packets, bytes, 0, err != nil)
	n.mu.Lock()
	n.repairStats.Asked += uint64(len(seqs))
	n.repairStats.Requests += packets
	n.mu.Unlock()
	if err != nil {
		n.log.Debug("repair request not sent", "peer", addr, "node", peer.Name(to), "err", err)
	}
}

// receiveRepair sends again what a peer asks for that this node keeps: on
// multicast (or an in-memory network) to every peer, at most once per
// half interval; on a unicast socket to the asker alone, when it is an
// address a peer is heard from.
func (n *Node) receiveRepair(msg wire.Message, p transport.Packet) {
	r := msg.Repair
	if r.To != n.id {
		return
	}
	n.mu.Lock()
	every := n.cfg.Interval
	known := !p.Unicast
	if p.Unicast {
		for _, pr := range n.peers {
			if pr.Info.Addr == p.From {
				known = true
				break
			}
		}
	}
	n.mu.Unlock()
	if !known && !n.relay.Heard(p.From) {
		n.mu.Lock()
		n.repairStats.Refused++
		n.mu.Unlock()
		return
	}
	key := streamKey{stream: r.Stream}
	t := n.transport
	switch r.Stream {
	case wire.StreamToRelay:
		key.to = msg.Node
	case wire.StreamCrossing:
		if l := n.relay.Link(); l != nil {
			t = l
		}
	}
	toAll := !p.Unicast && r.Stream == wire.StreamOwn
	var resent, suppressed, gone, bytes uint64
	for _, seq := range r.Seqs {
		pkt, ok := n.sent.find(key, seq, p.At, every, toAll)
		switch {
		case !ok:
			gone++
			continue
		case pkt == nil:
			suppressed++
			continue
		}
		var err error
		if u, uni := t.(transport.Unicaster); uni && !toAll {
			err = u.SendTo(pkt, p.From)
		} else {
			err = t.Send(pkt)
		}
		if err == nil {
			resent++
			bytes += uint64(len(pkt))
		}
	}
	n.countSent(resent, bytes, 0, false)
	n.mu.Lock()
	n.repairStats.Resent += resent
	n.repairStats.Suppressed += suppressed
	n.repairStats.Gone += gone
	n.mu.Unlock()
}
