package wire

import (
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file owns the wire format of a goodbye (type 11): the last
// datagram a node sends when it stops cleanly, after its last report, so
// that its peers stop counting it in their cluster at once rather than
// after the forget time (package gossip's members.go). The header is the
// one every datagram carries (wire.go), MAC included.
//
// Body: the empty msgpack map, the single byte 0x80, as a heartbeat's.
// Receivers read only the header: a goodbye carries nothing else, and a
// body they cannot parse is no reason to keep counting a node that says
// it left.

// MsgGoodbye says the sender stopped cleanly: no datagram follows it.
const MsgGoodbye MsgType = 11

// EncodeGoodbye emits one MsgGoodbye datagram with the next Seq. emit must
// not retain pkt.
func (e *Encoder) EncodeGoodbye(now time.Time, emit func(pkt []byte) error) error {
	if err := e.prepare(); err != nil {
		return err
	}
	buf := append(e.buf[:headerLen], msgpcode.FixedMapLow)
	return emit(e.seal(buf, MsgGoodbye, uint64(now.UnixMilli())))
}
