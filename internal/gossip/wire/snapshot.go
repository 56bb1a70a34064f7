// Wire format of warm start: a starting node's snapshot request (type 4)
// and the snapshot answers (type 3) its peers send back to it alone. The
// header is the one every datagram carries (wire.go).
//
// Body of a snapshot request (type 4): a msgpack map of options, today
// always empty (the single byte 0x80); a receiver skips keys it does not
// know. The asker is the header's node id: a peer answers each node id at
// most once.
//
// Body of a snapshot answer (type 3): a msgpack array of three elements:
//
//	0  the asking node's id, msgpack uint64 (0xcf and 8 bytes); any
//	   unsigned msgpack integer is accepted
//	1  last: true in the final datagram of the answer, false before
//	2  a map (fixmap, map16 or map32) from tag key, str (bin accepted), to
//	   the tag's bucket level in tokens, a float64 (0xcb and 8 bytes);
//	   float32 and any msgpack integer are accepted. A level is below the
//	   sender's burst; negative is debt. Entries with an empty key or a
//	   level that is not a number are dropped. A tag under a limit its
//	   callers stated has an array as its level (stated.go).
//
// The array must end exactly where the MAC, or the datagram, ends. The
// answers of one sender number their sequence apart from its other
// datagrams: they reach one node only, and would otherwise look lost to
// every other.

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// The warm start message types.
const (
	MsgSnapshot        MsgType = 3 // body: [asker id, last, tag → tokens]
	MsgSnapshotRequest MsgType = 4 // body: map of options, empty
)

// Level is one tag's bucket level in a snapshot answer: the tokens it
// held when the answer was sent, below the sender's burst. It is the
// table's own (bucket.Level), so an answer moves between the two without
// a copy.
type Level = bucket.Level

// Snapshot is the body of a snapshot answer, as Decode returns it in
// Message.Snapshot.
type Snapshot struct {
	To     uint64  // the node id that asked
	Last   bool    // the final datagram of the answer
	Levels []Level // never an empty key or a level that is not a number
}

var (
	errSnapshot = fmt.Errorf("%w: snapshot body is not [uint, bool, map]", ErrMalformed)
	errLevel    = fmt.Errorf("%w: level is not a number", ErrMalformed)
	errRequest  = fmt.Errorf("%w: snapshot request body is not a map", ErrMalformed)
)

// levelLen is the encoded size of one level entry.
func levelLen(key []byte) int { return entryLen(Hit{Key: string(key)}) - 1 + 9 }

// EncodeRequest emits one snapshot request with the next Seq.
func (e *Encoder) EncodeRequest(now time.Time, emit func(pkt []byte) error) error {
	if err := e.prepare(); err != nil {
		return err
	}
	buf := append(e.buf[:headerLen], msgpcode.FixedMapLow)
	return emit(e.seal(buf, MsgSnapshotRequest, uint64(now.UnixMilli())))
}

// EncodeSnapshot emits levels as snapshot answers to node to, each at
// most MaxPacket bytes and with the next Seq, and reports how many levels
// it packed: it stops at the first datagram that is full, or at the end
// of levels. With last set, the datagram that packs the final level (or,
// for no levels, an empty one) carries the last flag. A level too long
// for a datagram on its own is skipped and counted in skipped.
func (e *Encoder) EncodeSnapshot(now time.Time, to uint64, levels []Level, last bool, emit func(pkt []byte) error) (packed, skipped int, err error) {
	if err := e.prepare(); err != nil {
		return 0, 0, err
	}
	trailer := 0
	if len(e.Key) > 0 {
		trailer = macLen
	}
	buf := e.buf[:headerLen]
	buf = append(buf, msgpcode.FixedArrayLow|3, msgpcode.Uint64)
	buf = binary.BigEndian.AppendUint64(buf, to)
	flag := len(buf)
	buf = append(buf, msgpcode.False, msgpcode.Map16, 0, 0)
	n := 0
	i := 0
	kind := false // whether the datagram's levels are under stated limits
	for ; i < len(levels); i++ {
		l := levels[i]
		if len(l.Key) == 0 || math.IsNaN(l.Tokens) {
			skipped++
			continue
		}
		withQuota := stated(l.Quota)
		size := levelLen(l.Key)
		if withQuota {
			size += 1 + quotaLen(l.Quota)
		}
		if n > 0 && withQuota != kind {
			break // one sort of level per datagram (stated.go)
		}
		if len(buf)+size+trailer > e.MaxPacket {
			if n == 0 {
				skipped++
				continue
			}
			break
		}
		kind = withQuota
		buf = appendStr(buf, l.Key)
		if withQuota {
			buf = append(buf, msgpcode.FixedArrayLow|5)
		}
		buf = append(buf, msgpcode.Double)
		buf = binary.BigEndian.AppendUint64(buf, math.Float64bits(l.Tokens))
		if withQuota {
			buf = appendQuota(buf, l.Quota)
		}
		n++
	}
	if n == 0 && !(last && i == len(levels)) {
		return i, skipped, nil
	}
	if last && i == len(levels) {
		buf[flag] = msgpcode.True
	}
	binary.BigEndian.PutUint16(buf[flag+2:], uint16(n))
	return i, skipped, emit(e.seal(buf, MsgSnapshot, uint64(now.UnixMilli())))
}

// decodeSnapshot parses an answer's body, which must fill body exactly.
func (st *decodeState) decodeSnapshot(body []byte) (Snapshot, error) {
	var s Snapshot
	st.r.Reset(body)
	d := st.d
	if n, err := d.DecodeArrayLen(); err != nil || n != 3 {
		return s, errSnapshot
	}
	c, err := d.PeekCode()
	if err != nil || !(c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64)) {
		return s, errSnapshot
	}
	if s.To, err = d.DecodeUint64(); err != nil {
		return s, errTruncated
	}
	if c, err = d.PeekCode(); err != nil || (c != msgpcode.True && c != msgpcode.False) {
		return s, errSnapshot
	}
	s.Last, _ = d.DecodeBool()
	if c, err = d.PeekCode(); err != nil || !(msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32) {
		return s, errSnapshot
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return s, errTruncated
	}
	if n > st.r.Len()/2 {
		return s, errMapLen
	}
	if n > 0 {
		s.Levels = make([]Level, 0, n)
	}
	for range n {
		key, err := st.decodeKey()
		if err != nil {
			return Snapshot{}, err
		}
		c, err := d.PeekCode()
		if err != nil {
			return Snapshot{}, errTruncated
		}
		withQuota := msgpcode.IsFixedArray(c)
		if withQuota {
			if err := st.decodeStatedArray(); err != nil {
				return Snapshot{}, err
			}
			if c, err = d.PeekCode(); err != nil {
				return Snapshot{}, errTruncated
			}
		}
		if !(c == msgpcode.Double || c == msgpcode.Float || c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow ||
			(c >= msgpcode.Uint8 && c <= msgpcode.Int64)) {
			return Snapshot{}, errLevel
		}
		v, err := d.DecodeFloat64()
		if err != nil {
			return Snapshot{}, errTruncated
		}
		lv := Level{Tokens: v}
		if withQuota {
			if lv.Quota, err = st.decodeQuota(); err != nil {
				return Snapshot{}, err
			}
		}
		if len(key) > 0 && !math.IsNaN(v) {
			lv.Key = append([]byte(nil), key...)
			s.Levels = append(s.Levels, lv)
		}
	}
	if st.r.Len() != 0 {
		return Snapshot{}, errTrailing
	}
	return s, nil
}

// decodeRequest checks a request's body: a map whose entries it skips.
func (st *decodeState) decodeRequest(body []byte) error {
	st.r.Reset(body)
	d := st.d
	c, err := d.PeekCode()
	if err != nil || !(msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32) {
		return errRequest
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return errTruncated
	}
	if n > st.r.Len()/2 {
		return errMapLen
	}
	for range 2 * n {
		if err := d.Skip(); err != nil {
			return errTruncated
		}
	}
	if st.r.Len() != 0 {
		return errTrailing
	}
	return nil
}

// decodeWarm parses the body of a warm start message into m.
func (st *decodeState) decodeWarm(m *Message, body []byte) error {
	switch m.Type {
	case MsgSnapshot:
		s, err := st.decodeSnapshot(body)
		if err != nil {
			return err
		}
		m.Snapshot = &s
	case MsgSnapshotRequest:
		return st.decodeRequest(body)
	default:
		return errors.New("wire: not a warm start message")
	}
	return nil
}
