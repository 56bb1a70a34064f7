package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file owns the receiving side of the wire format (wire.go): Decode,
// and the pooled state it reads datagrams with.

// Decode parses one datagram. With a key (non-empty), a datagram without a
// valid MAC is ErrAuth; with a nil or empty key, a MAC is not required, and
// one that is present is not checked. Other failures are ErrMalformed, or
// ErrVersion for another format version; on any error the Message is zero.
// The Message does not alias b, which the caller may reuse at once.
// Decode is safe for concurrent use.
func Decode(b []byte, key []byte) (Message, error) {
	if len(b) < 3 {
		return Message{}, errShort
	}
	if b[0] != 'D' || b[1] != 'T' {
		return Message{}, errMagic
	}
	if b[2] != version {
		return Message{}, fmt.Errorf("%w %d", ErrVersion, b[2])
	}
	if len(b) < headerLen {
		return Message{}, errShort
	}
	st := decoders.Get().(*decodeState)
	defer st.release()

	end := len(b)
	if b[4]&flagMAC != 0 {
		if len(b) < headerLen+macLen {
			return Message{}, errShortMAC
		}
		end -= macLen
		if len(key) > 0 && !st.validMAC(key, b[:end], b[end:]) {
			return Message{}, ErrAuth
		}
	} else if len(key) > 0 {
		return Message{}, errNoMAC
	}
	m := Message{Header: Header{
		Type:        MsgType(b[3]),
		Node:        binary.BigEndian.Uint64(b[5:]),
		Seq:         binary.BigEndian.Uint64(b[13:]),
		Sent:        time.UnixMilli(int64(binary.BigEndian.Uint64(b[21:]))),
		Fingerprint: binary.BigEndian.Uint64(b[29:]),
		Relayed:     b[4]&flagRelayed != 0,
	}}
	switch m.Type {
	case MsgHits, MsgHeartbeat, MsgToRelay, MsgAggregate, MsgCrossing, MsgStatedHits:
		hits, err := st.decodeBody(b[headerLen:end], m.Type)
		if err != nil {
			return Message{}, err
		}
		m.Hits = hits
	case MsgSnapshot, MsgSnapshotRequest:
		if err := st.decodeWarm(&m, b[headerLen:end]); err != nil {
			return Message{}, err
		}
	case MsgPeers:
		if err := st.decodePeers(&m, b[headerLen:end]); err != nil {
			return Message{}, err
		}
	case MsgTop:
		if err := st.decodeTop(&m, b[headerLen:end]); err != nil {
			return Message{}, err
		}
	case MsgRepair:
		if err := st.decodeRepair(&m, b[headerLen:end]); err != nil {
			return Message{}, err
		}
	}
	return m, nil
}

// decodeState is what one Decode call reuses from the last: the msgpack
// decoder, a buffer for keys and the HMAC of the last key.
type decodeState struct {
	r       bytes.Reader
	d       *msgpack.Decoder
	key     []byte
	scratch []byte
	mac     hash.Hash
	sum     [macLen]byte
}

var decoders = sync.Pool{New: func() any {
	st := new(decodeState)
	// A bytes.Reader is an io.ByteScanner, so the decoder reads from it
	// without buffering of its own and st.r.Len() is what is left.
	st.d = msgpack.NewDecoder(&st.r)
	return st
}}

// release returns st to the pool, keeping no reference to the datagram.
func (st *decodeState) release() {
	st.r.Reset(nil)
	decoders.Put(st)
}

// validMAC reports whether mac is the HMAC-SHA256 of msg under key.
func (st *decodeState) validMAC(key, msg, mac []byte) bool {
	if st.mac == nil || !bytes.Equal(st.key, key) {
		st.key = append(st.key[:0], key...)
		st.mac = hmac.New(sha256.New, st.key)
	}
	st.mac.Reset()
	st.mac.Write(msg)
	return hmac.Equal(st.mac.Sum(st.sum[:0]), mac)
}

// decodeBody parses a body map of tag → hits that must fill body exactly.
// A heartbeat's map must be empty.
func (st *decodeState) decodeBody(body []byte, t MsgType) ([]Hit, error) {
	heartbeat, withQuota := t == MsgHeartbeat, t == MsgStatedHits
	st.r.Reset(body)
	d := st.d
	c, err := d.PeekCode()
	if err != nil || !(msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32) {
		return nil, errNotMap
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return nil, errTruncated
	}
	// Every entry takes at least two bytes: check the claimed length before
	// it sizes anything.
	if n > st.r.Len()/2 {
		return nil, errMapLen
	}
	if heartbeat && n != 0 {
		return nil, errHeartbeat
	}
	var hits []Hit
	if n > 0 {
		hits = make([]Hit, 0, n)
	}
	for range n {
		key, err := st.decodeKey()
		if err != nil {
			return nil, err
		}
		if withQuota {
			if err := st.decodeStatedArray(); err != nil {
				return nil, err
			}
		}
		count, err := st.decodeCount()
		if err != nil {
			return nil, err
		}
		h := Hit{Key: string(key), Count: count}
		if withQuota {
			if h.Quota, err = st.decodeQuota(); err != nil {
				return nil, err
			}
		}
		if len(key) > 0 && count > 0 {
			hits = append(hits, h)
		}
	}
	if st.r.Len() != 0 {
		return nil, errTrailing
	}
	if len(hits) == 0 {
		hits = nil
	}
	return hits, nil
}

// decodeKey reads a str or bin into st.scratch, valid until the next call.
func (st *decodeState) decodeKey() ([]byte, error) {
	c, err := st.d.PeekCode()
	if err != nil {
		return nil, errTruncated
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return nil, errKey
	}
	n, err := st.d.DecodeBytesLen()
	if err != nil {
		return nil, errTruncated
	}
	if n > st.r.Len() {
		return nil, errTruncated
	}
	if cap(st.scratch) < n {
		st.scratch = make([]byte, n)
	}
	key := st.scratch[:n]
	if err := st.d.ReadFull(key); err != nil {
		return nil, errTruncated
	}
	return key, nil
}

// decodeCount reads a msgpack integer that must lie in [0, 2^32).
func (st *decodeState) decodeCount() (uint32, error) {
	c, err := st.d.PeekCode()
	if err != nil {
		return 0, errTruncated
	}
	var v uint64
	switch {
	case c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64):
		v, err = st.d.DecodeUint64()
	case c >= msgpcode.NegFixedNumLow || (c >= msgpcode.Int8 && c <= msgpcode.Int64):
		var i int64
		i, err = st.d.DecodeInt64()
		if i < 0 {
			return 0, errCount
		}
		v = uint64(i)
	default:
		return 0, errCount
	}
	if err != nil {
		return 0, errTruncated
	}
	if v > math.MaxUint32 {
		return 0, errCount
	}
	return uint32(v), nil
}
