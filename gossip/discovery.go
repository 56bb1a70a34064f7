package gossip

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file owns peer discovery between unicast peers: a node that hears
// an authenticated unicast report from an address it does not send to
// learns it (join through one seed), and tells its peers whom it sends to,
// so that a node that joined through one seed soon reaches every one.

// MsgPeers lists the unicast addresses the sender reports to, so that its
// peers learn of each other. Body: a msgpack array of str, each
// "ip:port". Sent only with a key, and accepted only under one.
const MsgPeers MsgType = 5

// advertiseEvery is how many reports may pass between two adverts of an
// unchanged list of peers: a peer that missed one, or that was learned by
// another node since, hears of the others within this many intervals.
const advertiseEvery = 30

// Discovery is the side of a transport that learns peers. The node calls
// it only for datagrams whose MAC it checked under a key. Implementations
// are safe for concurrent use.
type Discovery interface {
	// Heard says that a report came from addr, a Packet's From: a peer
	// not sent to yet is learned, a learned one is kept.
	Heard(addr string, now time.Time)
	// Told says that a peer listed addr among the ones it reports to: it
	// is learned if new, and forgotten again unless heard from itself.
	Told(addr string, now time.Time)
	// Self says that addr, a Packet's From, is this node's own address.
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
		return n.transport.Send(pkt)
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
func (n *Node) discover(msg Message, p Packet, keyed bool) {
	d := n.cfg.Discovery
	if d == nil || !keyed || !p.Unicast {
		return
	}
	switch msg.Type {
	case MsgHits, MsgHeartbeat:
		d.Heard(p.From, p.At)
	case MsgPeers:
		for _, a := range msg.Peers {
			d.Told(a, p.At)
		}
	}
}

// EncodePeers emits addrs as MsgPeers datagrams, each at most MaxPacket
// bytes and with the next Seq. An empty list is one datagram with an empty
// array. emit must not retain pkt.
func (e *Encoder) EncodePeers(now time.Time, addrs []string, emit func(pkt []byte) error) error {
	if err := e.prepare(); err != nil {
		return err
	}
	trailer := 0
	if len(e.Key) > 0 {
		trailer = macLen
	}
	ms := uint64(now.UnixMilli())
	for first := true; first || len(addrs) > 0; first = false {
		buf := e.buf[:headerLen+3] // room for an array16 header
		n := 0
		for ; n < len(addrs); n++ {
			a := addrs[n]
			if len(a) > 255 || len(buf)+2+len(a)+trailer > e.MaxPacket {
				break
			}
			buf = appendStr(buf, a)
		}
		if n == 0 && len(addrs) > 0 {
			addrs = addrs[1:] // too long for any datagram: never a valid address
			continue
		}
		if n < 16 {
			buf[headerLen] = msgpcode.FixedArrayLow | byte(n)
			buf = append(buf[:headerLen+1], buf[headerLen+3:]...)
		} else {
			buf[headerLen] = msgpcode.Array16
			binary.BigEndian.PutUint16(buf[headerLen+1:], uint16(n))
		}
		if err := emit(e.seal(buf, MsgPeers, ms)); err != nil {
			return err
		}
		addrs = addrs[n:]
	}
	return nil
}

// decodePeers reads a MsgPeers body: an array of "ip:port" strings,
// ending exactly where the body does. Entries that are not an address and
// port are malformed.
func (st *decodeState) decodePeers(m *Message, body []byte) error {
	st.r.Reset(body)
	n, err := st.d.DecodeArrayLen()
	if err != nil || n < 0 {
		return fmt.Errorf("%w: peers body is not an array", ErrMalformed)
	}
	if n > len(body) {
		return errTruncated
	}
	m.Peers = make([]string, 0, n)
	for range n {
		b, err := st.decodeKey()
		if err != nil {
			return err
		}
		ap, err := netip.ParseAddrPort(string(b))
		if err != nil || ap.Port() == 0 {
			return fmt.Errorf("%w: peer %q is not an address and port", ErrMalformed, b)
		}
		m.Peers = append(m.Peers, ap.String())
	}
	if st.r.Len() != 0 {
		return errTrailing
	}
	return nil
}
