package gossip

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns peer discovery between unicast peers: a node that hears
// an authenticated unicast report from an address it does not send to
// learns it (join through one seed), and tells its peers whom it sends to,
// so that a node that joined through one seed soon reaches every one
// (wire.MsgPeers). Adverts are sent only with a key, and heeded only
// under one.

// advertiseEvery is how many reports may pass between two adverts of an
// unchanged list of peers: a peer that missed one, or that was learned by
// another node since, hears of the others within this many intervals.
const advertiseEvery = 30

// Discovery is the side of a transport that learns peers;
// *transport.UnicastTransport is one. The node calls it only for
// datagrams whose MAC it checked under a key. Implementations are safe
// for concurrent use.
type Discovery interface {
	// Heard says that a report came from addr, a transport.Packet's
	// From: a peer not sent to yet is learned, a learned one is kept.
	Heard(addr string, now time.Time)
	// Told says that a peer listed addr among the ones it reports to: it
	// is learned if new, and forgotten again unless heard from itself.
	Told(addr string, now time.Time)
	// Self says that addr, a transport.Packet's From, is this node's own
	// address.
	Self(addr string)
	// Advert returns the addresses to tell peers of at now (those
	// configured or resolved, and those learned and heard) and a number
	// that changes whenever they do.
	Advert(now time.Time) (addrs []string, version uint64)
	// SilentAfter gives the node's silence timeout (Config.SilentAfter),
	// at NewNode and at every Update: a learned peer unheard for longer is
	// forgotten.
	SilentAfter(d time.Duration)
}

var _ Discovery = (*transport.UnicastTransport)(nil)

// advertise sends the list of peers when it changed, or every
// advertiseEvery reports. Called with reportMu held.
func (n *Node) advertise(now time.Time) {
	d := n.cfg.Discovery
	if d == nil || len(n.enc.Key) == 0 {
		return
	}
	addrs, version := d.Advert(now)
	n.sinceAdvert++
	if version == n.advertised && n.sinceAdvert < advertiseEvery {
		return
	}
	n.advertised, n.sinceAdvert = version, 0
	var packets, bytes uint64
	err := n.enc.EncodePeers(now, addrs, func(pkt []byte) error {
		packets++
		bytes += uint64(len(pkt))
		return n.sendOwn(now)(pkt)
	})
	n.mu.Lock()
	n.stats.PacketsSent += packets
	n.stats.BytesSent += bytes
	if err != nil {
		n.stats.SendErrors++
	}
	n.mu.Unlock()
}

// discover learns from an accepted datagram, when it came by unicast
// under a key.
func (n *Node) discover(msg wire.Message, p transport.Packet, keyed bool) {
	d := n.cfg.Discovery
	if d == nil || !keyed || !p.Unicast {
		return
	}
	switch msg.Type {
	case wire.MsgHits, wire.MsgHeartbeat, wire.MsgStatedHits:
		d.Heard(p.From, p.At)
	case wire.MsgPeers:
		for _, a := range msg.Peers {
			d.Told(a, p.At)
		}
	}
}
