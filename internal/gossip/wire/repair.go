// Wire format of a repair request (type 10): a receiver names the
// datagrams missing from one of a sender's sequences, and the sender sends
// those it still keeps again, byte for byte as first sent (package
// gossip's repair.go). The header is the one every datagram carries
// (wire.go); its sequence number is the asker's own for repair requests,
// which no receiver checks, since asking twice only asks again.
//
// Body: a msgpack array of three elements:
//
//	0  to: uint, the node id of the sender asked
//	1  stream: uint, which of its sequences: 0 its own (every type it
//	   sends to all its peers), 1 its hits for the asking relay (type 6),
//	   2 its crossings to other segments' relays (type 8)
//	2  seqs: an array of uint, the sequence numbers missing, ascending,
//	   at most MaxRepairSeqs
//
// Integers are written in their smallest msgpack unsigned encoding;
// receivers accept any msgpack integer from 0 to 2^64-1. The array must
// end exactly where the MAC, or the datagram, ends.

package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// MsgRepair asks a sender for datagrams of one of its sequences again.
const MsgRepair MsgType = 10

// Stream names one of a sender's sequences, as a repair request asks for
// it.
type Stream uint8

// The streams a sender numbers.
const (
	StreamOwn      Stream = 0 // every datagram it sends to all its peers
	StreamToRelay  Stream = 1 // its hits for one relay (MsgToRelay), the asker
	StreamCrossing Stream = 2 // a relay's sums for other segments (MsgCrossing)
)

// MaxRepairSeqs bounds the numbers one repair request names: with 9-byte
// integers it fits the smallest datagram, MAC included.
const MaxRepairSeqs = 44

// Repair is the body of a MsgRepair.
type Repair struct {
	To     uint64
	Stream Stream
	Seqs   []uint64
}

var errRepair = fmt.Errorf("%w: repair body is not [uint, uint, [uint...]] with 1 to %d numbers", ErrMalformed, MaxRepairSeqs)

// EncodeRepair emits r as one MsgRepair datagram, with the next Seq, or
// as several when it names more than MaxRepairSeqs numbers. emit must not
// retain pkt.
func (e *Encoder) EncodeRepair(now time.Time, r Repair, emit func(pkt []byte) error) error {
	if err := e.prepare(); err != nil {
		return err
	}
	ms := uint64(now.UnixMilli())
	for seqs := r.Seqs; len(seqs) > 0; {
		n := min(len(seqs), MaxRepairSeqs)
		buf := appendArrayLen(e.buf[:headerLen], 3)
		buf = appendUint64(buf, r.To)
		buf = appendUint64(buf, uint64(r.Stream))
		buf = appendArrayLen(buf, n)
		for _, s := range seqs[:n] {
			buf = appendUint64(buf, s)
		}
		if err := emit(e.seal(buf, MsgRepair, ms)); err != nil {
			return err
		}
		seqs = seqs[n:]
	}
	return nil
}

// decodeRepair parses a MsgRepair body, which must fill body exactly.
func (st *decodeState) decodeRepair(m *Message, body []byte) error {
	st.r.Reset(body)
	if n, err := st.d.DecodeArrayLen(); err != nil || n != 3 {
		return errRepair
	}
	to, err := st.decodeUint()
	if err != nil {
		return err
	}
	stream, err := st.decodeUint()
	if err != nil {
		return err
	}
	if stream > uint64(StreamCrossing) {
		return fmt.Errorf("%w: repair of stream %d", ErrMalformed, stream)
	}
	n, err := st.d.DecodeArrayLen()
	if err != nil || n < 1 || n > MaxRepairSeqs {
		return errRepair
	}
	r := &Repair{To: to, Stream: Stream(stream), Seqs: make([]uint64, n)}
	for i := range r.Seqs {
		if r.Seqs[i], err = st.decodeUint(); err != nil {
			return err
		}
	}
	if st.r.Len() != 0 {
		return errTrailing
	}
	m.Repair = r
	return nil
}

// PeekSeq returns the type, sender and sequence number of a datagram this
// code encoded, without checking it: a sender reads its own datagrams
// back to keep them for repair.
func PeekSeq(pkt []byte) (t MsgType, node, seq uint64, ok bool) {
	if len(pkt) < headerLen || pkt[0] != 'D' || pkt[1] != 'T' || pkt[2] != version {
		return 0, 0, 0, false
	}
	return MsgType(pkt[3]), binary.BigEndian.Uint64(pkt[5:]), binary.BigEndian.Uint64(pkt[13:]), true
}
