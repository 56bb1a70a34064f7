package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file owns the wire format of peer discovery (package gossip's
// discovery.go): a node tells its unicast peers whom it reports to.

// MsgPeers lists the unicast addresses the sender reports to, so that its
// peers learn of each other. Body: a msgpack array of str, each
// "ip:port". Nodes send it only with a key, and accept it only under one.
const MsgPeers MsgType = 5

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
