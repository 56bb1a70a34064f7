package gossip

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/gossip/relay"
	"github.com/dthrottle/dthrottle/gossip/transport"
	"github.com/dthrottle/dthrottle/gossip/wire"
)

// This file owns relaying on a node (docs/scaling.md): sending the node's
// hits to its segment's relays instead of to every peer, and applying the
// relays' aggregates less the node's own hits; on a relay, summing what
// the segment's nodes send, passing it on every interval to the segment
// and to the relays of other segments, and passing into the segment what
// those send. The sums and the ledger of own hits are package relay's, the
// message types wire/relay.go's.

// RelayMode says how a node takes part in relaying.
type RelayMode uint8

const (
	// RelayOff sends the node's hits to every peer, as without relays. It
	// still applies the aggregates of any relay it hears.
	RelayOff RelayMode = iota
	// RelayUse sends the node's hits to the relays of its segment it
	// hears, and to every peer while it hears none.
	RelayUse
	// RelayServe makes the node one of its segment's relays, and sends
	// its own hits as RelayUse does.
	RelayServe
)

// String is the mode as configuration names it.
func (m RelayMode) String() string {
	switch m {
	case RelayOff:
		return "off"
	case RelayUse:
		return "use"
	case RelayServe:
		return "serve"
	}
	return fmt.Sprintf("RelayMode(%d)", uint8(m))
}

// RelayConfig configures relaying. The zero value is RelayOff.
type RelayConfig struct {
	Mode RelayMode
	// Hold gives, on a relay, a tag's threshold and hold age (HoldFor);
	// nil holds nothing back.
	Hold relay.HoldFunc
	// MaxAge is the longest hold age Hold gives: a node forgets the hits
	// it sent to relays and has not seen come back after MaxAge plus two
	// intervals and the silence timeout.
	MaxAge time.Duration
	// Link, on a relay, carries crossings to the relays of other segments
	// and receives theirs; nil joins no other segment. The node closes it
	// on Stop. It is set at NewNode only.
	Link transport.Transport
}

// Relay states a peer can have in the peers view (PeerInfo.Relay).
const (
	RelayOfSegment = "segment" // a relay of this node's segment
	RelayOfRemote  = "remote"  // a relay of another segment
)

// relayState is a node's side of relaying. Its mutex guards everything
// but encs, which only Report uses, under the node's reportMu.
type relayState struct {
	mu      sync.Mutex
	cfg     RelayConfig
	link    transport.Transport // cfg.Link as NewNode got it
	every   time.Duration
	relays  map[uint64]*relayHeard // this segment's relays, by node id
	remote  map[uint64]*peer       // other segments' relays, with their windows
	senders map[uint64]*peer       // nodes that send this relay hits
	sum     *relay.Sum             // when serving
	final   bool                   // stopping: the last aggregate holds nothing back
	foreign map[string]uint32      // other segments' hits for the next aggregate
	own     *relay.OwnHits
	back    []Hit // forward's own hits come back, reused
	stats   RelayNodeStats

	encs    map[uint64]*wire.Encoder // per relay, the stream of hits sent to it
	liveBuf []liveRelay
	linkEnc wire.Encoder
	byRelay [][]Hit
	out     []Hit
	cross   []Hit
	mine    []Hit
}

type relayHeard struct {
	addr   string
	last   time.Time
	silent bool
}

// liveRelay is a relay a node sends to: its id and address, or itself.
type liveRelay struct {
	id   uint64
	addr string
	self bool
}

// RelayNodeStats are a node's relaying counters, and its relay's sums.
type RelayNodeStats struct {
	Mode         string `json:"mode"`
	Relays       int    `json:"relays"`        // this segment's relays heard now
	RemoteRelays int    `json:"remote_relays"` // other segments' relays heard now
	// Reports sent through relays, and sent to every peer while relaying
	// is on but no relay was heard.
	ViaRelays, Direct uint64
	// Datagrams and bytes sent: hits to relays (type 6), aggregates (7),
	// crossings (8).
	ToRelayPackets, ToRelayBytes     uint64
	AggregatePackets, AggregateBytes uint64
	CrossingPackets, CrossingBytes   uint64
	// Received and accepted.
	ToRelayReceived, ToRelayBytesReceived      uint64
	AggregatesReceived, AggregateBytesReceived uint64
	CrossingsReceived, CrossingBytesReceived   uint64
	ForeignHits                                uint64 // other segments' hits passed into this one
	RemoteSilences                             uint64 // times a relay of another segment went silent
	CrossingsLost                              uint64 // crossings missing from other segments' relays' sequences
	// Crossings from a relay of this very segment, ignored (relay.peers
	// should list only other segments' relays).
	CrossingsOwnSegment uint64
	OwnPending          int    // tags whose hits sent to relays have not come back
	OwnForgotten        uint64 // hits not seen back in time, forgotten
	Sum                 relay.Stats
}

func (rs *relayState) init(cfg RelayConfig, every time.Duration) {
	rs.relays = map[uint64]*relayHeard{}
	rs.remote = map[uint64]*peer{}
	rs.senders = map[uint64]*peer{}
	rs.foreign = map[string]uint32{}
	rs.encs = map[uint64]*wire.Encoder{}
	rs.every = every
	rs.link = cfg.Link
	rs.own = relay.NewOwnHits(0)
	rs.set(cfg)
}

// set applies cfg but its Link. Called with mu held, or before use.
func (rs *relayState) set(cfg RelayConfig) {
	rs.cfg = cfg
	rs.own.SetForget(cfg.MaxAge + 2*rs.every + silentAfter(rs.every))
	hold := cfg.Hold
	if hold == nil {
		hold = func(string) (uint32, time.Duration) { return 1, rs.every }
	}
	switch {
	case cfg.Mode != RelayServe:
		rs.sum = nil
	case rs.sum == nil:
		rs.sum = relay.NewSum(hold, 2, rs.every)
	default:
		rs.sum.SetHold(hold, rs.every)
	}
}

// setEvery applies a new interval (a reload) to the relay's aggregates
// and the forget time of the node's own hits.
func (rs *relayState) setEvery(every time.Duration) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.every = every
	rs.set(rs.cfg)
}

// SetRelay changes the relaying mode and hold-back from the next report
// on (a reload). The link to other segments stays the one NewNode got.
// A relay that stops serving drops the sums it held.
func (n *Node) SetRelay(cfg RelayConfig) {
	rs := &n.relay
	rs.mu.Lock()
	rs.set(cfg)
	rs.mu.Unlock()
}

// live returns the relays to send to at now, ordered by node id (so that
// every node of the segment picks alike): those heard within the silence
// timeout, and the node itself when it serves. None when relaying is off.
func (rs *relayState) live(now time.Time, self uint64, silent time.Duration, dst []liveRelay) []liveRelay {
	if rs.cfg.Mode == RelayOff {
		return dst
	}
	if rs.cfg.Mode == RelayServe {
		dst = append(dst, liveRelay{id: self, self: true})
	}
	for id, r := range rs.relays {
		if now.Sub(r.last) <= silent {
			dst = append(dst, liveRelay{id: id, addr: r.addr})
		}
	}
	slices.SortFunc(dst, func(a, b liveRelay) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return dst
}

// route returns the relays this report goes to, none to send to every
// peer, and marks the node's datagrams as relayed while relaying is on.
// Called with reportMu held.
func (n *Node) route(now time.Time) []liveRelay {
	rs := &n.relay
	silent := n.silentAfter()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.liveBuf = rs.live(now, n.id, silent, rs.liveBuf[:0])
	rs.stats.OwnForgotten += rs.own.Forget(now)
	n.enc.Relayed = rs.cfg.Mode != RelayOff
	if len(rs.liveBuf) == 0 && n.enc.Relayed {
		rs.stats.Direct++
	}
	return rs.liveBuf
}

// sendToRelays sends each hit to the relay PickRelay gives among live, a
// relay's own share to its sums, and records them as sent. Called with
// reportMu held.
func (n *Node) sendToRelays(now time.Time, hits []Hit, live []liveRelay) error {
	rs := &n.relay
	for len(rs.byRelay) < len(live) {
		rs.byRelay = append(rs.byRelay, nil)
	}
	for k := range live {
		rs.byRelay[k] = rs.byRelay[k][:0]
	}
	for _, h := range hits {
		k := relay.Pick(h.Key, len(live))
		rs.byRelay[k] = append(rs.byRelay[k], h)
	}
	rs.mu.Lock()
	for k, r := range live {
		rs.own.SentCapped(now, rs.byRelay[k])
		if r.self && rs.sum != nil {
			rs.sum.AddCapped(now, rs.byRelay[k])
		}
	}
	rs.stats.ViaRelays++
	rs.mu.Unlock()

	u, _ := n.transport.(transport.Unicaster)
	var errs []error
	var packets, bytes uint64
	for k, r := range live {
		if r.self || len(rs.byRelay[k]) == 0 {
			continue
		}
		enc := rs.encs[r.id]
		if enc == nil {
			enc = &wire.Encoder{Node: n.id}
			rs.encs[r.id] = enc
		}
		n.configure(enc)
		enc.Relayed = true
		send := n.transport.Send
		if u != nil {
			send = func(pkt []byte) error { return u.SendTo(pkt, r.addr) }
		}
		p, b, err := sendRelay(enc, now, wire.MsgToRelay, rs.byRelay[k], send)
		packets, bytes = packets+p, bytes+b
		if err != nil {
			errs = append(errs, err)
		}
	}
	n.countSent(packets, bytes, len(hits), len(errs) > 0)
	rs.mu.Lock()
	rs.stats.ToRelayPackets += packets
	rs.stats.ToRelayBytes += bytes
	for id := range rs.encs {
		if _, ok := rs.relays[id]; !ok && id != n.id {
			delete(rs.encs, id) // a relay forgotten, or restarted under a new id
		}
	}
	rs.mu.Unlock()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// sendRelay encodes hits as datagrams of type t with enc and sends each,
// stopping at the first error; it returns what was sent.
func sendRelay(enc *wire.Encoder, now time.Time, t wire.MsgType, hits []Hit, send func([]byte) error) (packets, bytes uint64, err error) {
	_, err = enc.EncodeRelay(now, t, hits, func(pkt []byte) error {
		if err := send(pkt); err != nil {
			return err
		}
		packets++
		bytes += uint64(len(pkt))
		return nil
	})
	return packets, bytes, err
}

// forward, on a relay, sends the aggregate of this interval to the
// segment (an empty one when there is nothing to pass on), the segment's
// own share of it to the relays of other segments, and applies to this
// node's table what it carries of other nodes' hits. Called with reportMu
// held.
func (n *Node) forward(now time.Time) error {
	rs := &n.relay
	rs.mu.Lock()
	if rs.sum == nil {
		rs.mu.Unlock()
		return nil
	}
	if rs.final {
		rs.out = rs.sum.FlushAll(rs.out[:0])
	} else {
		rs.out = rs.sum.Flush(now, rs.out[:0])
	}
	rs.cross = append(rs.cross[:0], rs.out...)
	for key, c := range rs.foreign {
		rs.out = append(rs.out, Hit{Key: key, Count: c})
		rs.stats.ForeignHits += uint64(c)
	}
	clear(rs.foreign)
	rs.mine, rs.back = rs.own.Split(rs.out, rs.mine[:0], rs.back[:0])
	link := rs.link
	rs.mu.Unlock()
	n.snap.reported(rs.back)

	var errs []error
	packets, bytes, err := sendRelay(&n.enc, now, wire.MsgAggregate, rs.out, n.transport.Send)
	if err != nil {
		errs = append(errs, err)
	}
	var cpackets, cbytes uint64
	if link != nil {
		n.configure(&rs.linkEnc)
		rs.linkEnc.Node = n.id
		if cpackets, cbytes, err = sendRelay(&rs.linkEnc, now, wire.MsgCrossing, rs.cross, link.Send); err != nil {
			errs = append(errs, err)
		}
	}
	n.countSent(packets+cpackets, bytes+cbytes, 0, len(errs) > 0)
	rs.mu.Lock()
	rs.stats.AggregatePackets += packets
	rs.stats.AggregateBytes += bytes
	rs.stats.CrossingPackets += cpackets
	rs.stats.CrossingBytes += cbytes
	rs.mu.Unlock()
	if len(rs.mine) > 0 {
		n.cfg.Apply(now, rs.mine)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
