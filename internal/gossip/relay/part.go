package relay

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns a node's part in relaying (docs/scaling.md): sending the
// node's hits to its segment's relays instead of to every peer, and
// applying the relays' aggregates less the node's own hits; on a relay,
// summing what the segment's nodes send, passing it on every interval to
// the segment and to the relays of other segments, and passing into the
// segment what those send. The node is given a Part (gossip.NewNode makes
// one) and reaches it at each report (Send, Forward) and for each
// relaying datagram it accepts (part_recv.go); the Part reaches the node
// through Host.

// Mode says how a node takes part in relaying.
type Mode uint8

const (
	// Off sends the node's hits to every peer, as without relays. It still
	// applies the aggregates of any relay it hears.
	Off Mode = iota
	// Use sends the node's hits to the relays of its segment it hears,
	// and to every peer while it hears none.
	Use
	// Serve makes the node one of its segment's relays, and sends its own
	// hits as Use does.
	Serve
)

// String is the mode as configuration names it.
func (m Mode) String() string {
	switch m {
	case Off:
		return "off"
	case Use:
		return "use"
	case Serve:
		return "serve"
	}
	return fmt.Sprintf("relay.Mode(%d)", uint8(m))
}

// Config configures relaying. The zero value is Off.
type Config struct {
	Mode Mode
	// Hold gives, on a relay, a tag's threshold and hold age (HoldFor);
	// nil holds nothing back.
	Hold HoldFunc
	// MaxAge is the longest hold age Hold gives: a node forgets the hits
	// it sent to relays and has not seen come back after MaxAge plus two
	// intervals and the silence timeout.
	MaxAge time.Duration
	// Link, on a relay, carries crossings to the relays of other segments
	// and receives theirs; nil joins no other segment. The node closes it
	// on Stop. It is set at NewPart only.
	Link transport.Transport
}

// Host is the node a Part belongs to.
type Host interface {
	// Locker is the lock that holds back warm start's exports: held while
	// what peers know of the table changes, as Known says.
	sync.Locker
	// Known says that peers know hits of this node's from now on: a
	// relay's aggregate brought them back. Called with the Locker held.
	Known(hits []Hit)
	// ID is the node's id.
	ID() uint64
	// SilentAfter is the node's silence timeout now.
	SilentAfter() time.Duration
	// Configure sets e's datagram size, key and fingerprint to the node's.
	Configure(e *wire.Encoder)
	// Transport is the node's transport to its peers.
	Transport() transport.Transport
	// SendOwn sends hits to every peer as datagrams of type t in the
	// node's own sequence, as its reports go. Called only from Forward.
	SendOwn(now time.Time, t wire.MsgType, hits []Hit) (packets, bytes uint64, err error)
	// Keep keeps a datagram sent at now in stream s (to the relay to, for
	// wire.StreamToRelay), for repair.
	Keep(now time.Time, s wire.Stream, to uint64, pkt []byte)
	// CountSent and CountReceived add to the node's traffic counters,
	// CountDuplicate to its duplicates dropped.
	CountSent(packets, bytes uint64, tags int, failed bool)
	CountReceived(bytes, tags int)
	CountDuplicate()
	// Apply subtracts hits other nodes served from the node's table.
	Apply(now time.Time, hits []Hit)
	// Logger is the node's.
	Logger() *slog.Logger
}

// Part is a node's part in relaying. Its mutex guards everything but
// encs and the buffers Send and Forward use, which only the node's report
// touches, one at a time.
type Part struct {
	host Host
	log  *slog.Logger

	mu      sync.Mutex
	cfg     Config
	link    transport.Transport // cfg.Link as NewPart got it
	every   time.Duration
	silent  time.Duration     // the silence timeout of every, for forgetting own hits
	relays  map[uint64]*heard // this segment's relays, by node id
	remote  peer.Table        // other segments' relays, with their windows
	senders peer.Table        // nodes that send this relay hits
	sum     *Sum              // when serving
	final   bool              // stopping: the last aggregate holds nothing back
	foreign map[string]uint32 // other segments' hits for the next aggregate
	own     *OwnHits
	back    []Hit // Forward's own hits come back, reused
	stats   NodeStats

	encs    map[uint64]*toRelay // per relay, the stream of hits sent to it
	liveBuf []live
	linkEnc wire.Encoder
	byRelay [][]Hit
	out     []Hit
	cross   []Hit
	mine    []Hit
}

type heard struct {
	addr   string
	last   time.Time
	silent bool
}

// live is a relay a node sends to: its id and address, or itself.
type live struct {
	id   uint64
	addr string
	self bool
}

// NodeStats are a node's relaying counters, and its relay's sums.
type NodeStats struct {
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
	Sum                 Stats
}

// NewPart returns host's part in relaying, for reports every interval
// and a silence timeout of silent.
func NewPart(cfg Config, host Host, every, silent time.Duration) *Part {
	p := &Part{
		host:    host,
		log:     host.Logger(),
		relays:  map[uint64]*heard{},
		remote:  peer.Table{},
		senders: peer.Table{},
		foreign: map[string]uint32{},
		encs:    map[uint64]*toRelay{},
		every:   every,
		silent:  silent,
		link:    cfg.Link,
		own:     NewOwnHits(0),
	}
	p.set(cfg)
	return p
}

// set applies cfg but its Link. Called with mu held, or before use.
func (p *Part) set(cfg Config) {
	p.cfg = cfg
	// A hit comes back late when its datagram, or the aggregate's, was
	// lost and is repaired: remembered until repair gives up on it, so
	// that it is never applied to this node's own table as a peer's.
	p.own.SetForget(cfg.MaxAge + 2*p.every + p.silent + peer.RepairWithin(p.every))
	hold := cfg.Hold
	if hold == nil {
		hold = func(string) (uint32, time.Duration) { return 1, p.every }
	}
	switch {
	case cfg.Mode != Serve:
		p.sum = nil
	case p.sum == nil:
		p.sum = NewSum(hold, 2, p.every)
	default:
		p.sum.SetHold(hold, p.every)
	}
}

// SetEvery applies a new interval and its silence timeout (a reload) to
// the relay's aggregates and the forget time of the node's own hits.
func (p *Part) SetEvery(every, silent time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.every, p.silent = every, silent
	p.set(p.cfg)
}

// Set changes the relaying mode and hold-back from the next report on (a
// reload). The link to other segments stays the one NewPart got. A relay
// that stops serving drops the sums it held.
func (p *Part) Set(cfg Config) {
	p.mu.Lock()
	p.set(cfg)
	p.mu.Unlock()
}

// Final makes the next Forward pass on all the relay holds: the node is
// stopping.
func (p *Part) Final() {
	p.mu.Lock()
	p.final = true
	p.mu.Unlock()
}

// Link is the link to other segments' relays NewPart got, or nil.
func (p *Part) Link() transport.Transport { return p.link }

// Pending moves levels, by sign, by the node's own hits that its peers do
// not know yet because they sit at a relay (OwnHits.Pending).
func (p *Part) Pending(levels []wire.Level, sign float64) {
	p.mu.Lock()
	p.own.Pending(levels, sign)
	p.mu.Unlock()
}

// live returns the relays to send to at now, ordered by node id (so that
// every node of the segment picks alike): those heard within the silence
// timeout, and the node itself when it serves. None when relaying is off.
// Called with mu held.
func (p *Part) live(now time.Time, self uint64, silent time.Duration, dst []live) []live {
	if p.cfg.Mode == Off {
		return dst
	}
	if p.cfg.Mode == Serve {
		dst = append(dst, live{id: self, self: true})
	}
	for id, r := range p.relays {
		if now.Sub(r.last) <= silent {
			dst = append(dst, live{id: id, addr: r.addr})
		}
	}
	slices.SortFunc(dst, func(a, b live) int {
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

// Send sends a report's hits through the relays heard at now, each to
// the relay Pick gives, a relay's own share to its sums, and records them
// as sent to relays. It reports whether it sent them (none heard, or
// relaying off: the node sends them to every peer itself) and whether the
// node's datagrams are to be marked relayed (relaying is on). Called from
// the node's report, with the host's Locker held.
func (p *Part) Send(now time.Time, hits []Hit) (sent, relayed bool, err error) {
	self, silent := p.host.ID(), p.host.SilentAfter()
	p.mu.Lock()
	p.liveBuf = p.live(now, self, silent, p.liveBuf[:0])
	p.stats.OwnForgotten += p.own.Forget(now)
	relayed = p.cfg.Mode != Off
	if len(p.liveBuf) == 0 {
		if relayed {
			p.stats.Direct++
		}
		p.mu.Unlock()
		return false, relayed, nil
	}
	p.mu.Unlock()
	return true, relayed, p.sendToRelays(now, hits, p.liveBuf)
}

// sendToRelays sends each hit to the relay Pick gives among live, and
// records them as sent.
func (p *Part) sendToRelays(now time.Time, hits []Hit, live []live) error {
	for len(p.byRelay) < len(live) {
		p.byRelay = append(p.byRelay, nil)
	}
	for k := range live {
		p.byRelay[k] = p.byRelay[k][:0]
	}
	for _, h := range hits {
		k := Pick(h.Key, len(live))
		p.byRelay[k] = append(p.byRelay[k], h)
	}
	p.mu.Lock()
	for k, r := range live {
		p.own.SentCapped(now, p.byRelay[k])
		if r.self && p.sum != nil {
			p.sum.AddCapped(now, p.byRelay[k])
		}
	}
	p.stats.ViaRelays++
	p.mu.Unlock()

	t := p.host.Transport()
	u, _ := t.(transport.Unicaster)
	var errs []error
	var packets, bytes uint64
	for k, r := range live {
		st := p.encs[r.id]
		if st == nil {
			st = &toRelay{enc: wire.Encoder{Node: p.host.ID()}}
			p.encs[r.id] = st
		}
		if r.self || len(p.byRelay[k]) == 0 && !st.open {
			continue
		}
		// An interval with hits is followed by one datagram at least,
		// empty if need be, so that the relay sees a loss of the last
		// one at once, and asks for it again (package gossip's repair.go).
		st.open = len(p.byRelay[k]) > 0
		enc := &st.enc
		p.host.Configure(enc)
		enc.Relayed = true
		send := func(pkt []byte) error {
			p.host.Keep(now, wire.StreamToRelay, r.id, pkt)
			if u != nil {
				return u.SendTo(pkt, r.addr)
			}
			return t.Send(pkt)
		}
		n, b, err := Encode(enc, now, wire.MsgToRelay, p.byRelay[k], send)
		packets, bytes = packets+n, bytes+b
		if err != nil {
			errs = append(errs, err)
		}
	}
	p.host.CountSent(packets, bytes, len(hits), len(errs) > 0)
	p.mu.Lock()
	p.stats.ToRelayPackets += packets
	p.stats.ToRelayBytes += bytes
	for id := range p.encs {
		if _, ok := p.relays[id]; !ok && id != p.host.ID() {
			delete(p.encs, id) // a relay forgotten, or restarted under a new id
		}
	}
	p.mu.Unlock()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Encode encodes hits as datagrams of type t with enc and sends each,
// stopping at the first error; it returns what was sent.
func Encode(enc *wire.Encoder, now time.Time, t wire.MsgType, hits []Hit, send func([]byte) error) (packets, bytes uint64, err error) {
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

// Forward, on a relay, sends the aggregate of this interval to the
// segment (an empty one when there is nothing to pass on), the segment's
// own share of it to the relays of other segments, and applies to the
// node's table what it carries of other nodes' hits. Called from the
// node's report, with the host's Locker held.
func (p *Part) Forward(now time.Time) error {
	p.mu.Lock()
	if p.sum == nil {
		p.mu.Unlock()
		return nil
	}
	if p.final {
		p.out = p.sum.FlushAll(p.out[:0])
	} else {
		p.out = p.sum.Flush(now, p.out[:0])
	}
	p.cross = append(p.cross[:0], p.out...)
	for key, c := range p.foreign {
		p.out = append(p.out, Hit{Key: key, Count: c})
		p.stats.ForeignHits += uint64(c)
	}
	clear(p.foreign)
	p.mine, p.back = p.own.Split(p.out, p.mine[:0], p.back[:0])
	link := p.link
	p.mu.Unlock()
	p.host.Known(p.back)

	var errs []error
	packets, bytes, err := p.host.SendOwn(now, wire.MsgAggregate, p.out)
	if err != nil {
		errs = append(errs, err)
	}
	var cpackets, cbytes uint64
	if link != nil {
		p.host.Configure(&p.linkEnc)
		p.linkEnc.Node = p.host.ID()
		send := func(pkt []byte) error {
			p.host.Keep(now, wire.StreamCrossing, 0, pkt)
			return link.Send(pkt)
		}
		if cpackets, cbytes, err = Encode(&p.linkEnc, now, wire.MsgCrossing, p.cross, send); err != nil {
			errs = append(errs, err)
		}
	}
	p.host.CountSent(packets+cpackets, bytes+cbytes, 0, len(errs) > 0)
	p.mu.Lock()
	p.stats.AggregatePackets += packets
	p.stats.AggregateBytes += bytes
	p.stats.CrossingPackets += cpackets
	p.stats.CrossingBytes += cbytes
	p.mu.Unlock()
	if len(p.mine) > 0 {
		p.host.Apply(now, p.mine)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// toRelay is the stream of a node's hits for one relay: its sequence, and
// whether the last interval sent it hits.
type toRelay struct {
	enc  wire.Encoder
	open bool
}
