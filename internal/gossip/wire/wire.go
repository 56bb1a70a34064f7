// This file owns the header every datagram carries, the hits and
// heartbeat bodies and the Encoder (docs/wire-format.md; the reasons for
// the format: docs/design.md, Between peers).
//
// Every datagram is self-contained: a fixed header, a msgpack body, then an
// optional HMAC-SHA256 trailer. Integers in the header are big-endian.
//
//	offset  size  field
//	0       2     magic "DT" (0x44 0x54)
//	2       1     version, 1
//	3       1     type: 1 hits, 2 heartbeat, 3 snapshot answer, 4 snapshot
//	              request (snapshot.go), 5 peers (peers.go), 6 hits for a
//	              relay, 7 a relay's aggregate, 8 an aggregate for another
//	              segment (relay.go), 9 heaviest tags (top.go), 10 a
//	              repair request (repair.go), 11 goodbye (goodbye.go),
//	              12 hits under limits callers stated (stated.go)
//	4       1     flags: bit 0 set when the MAC trailer is present; bit 1
//	              set when the sender reports through relays while it
//	              hears one (its silence is then expected); the other bits
//	              are reserved, written as 0 and ignored on receipt
//	5       8     sender node id, random per process start
//	13      8     sequence number per sender, +1 per datagram, first is 1
//	21      8     sender's clock, Unix milliseconds
//	29      8     fingerprint of the sender's policies
//	37      n     body, msgpack
//	37+n    32    HMAC-SHA256 over bytes [0, 37+n), only when flag bit 0 is set
//
// Body of a hits datagram (type 1): one msgpack map (fixmap, map16 or map32)
// from tag key to hits. Keys are written as msgpack str holding the tag's raw
// bytes (which need not be UTF-8); bin is accepted too. Counts are written in
// the smallest msgpack unsigned encoding (positive fixint, uint8, uint16,
// uint32); any msgpack integer in [0, 2^32-1] is accepted. The map must end
// exactly where the MAC (or the datagram) begins. Entries with an empty key
// or a zero count are no-ops: the encoder never writes them and Decode drops
// them.
//
// Body of a heartbeat (type 2): the empty fixmap, the single byte 0x80.
//
// Receivers ignore types they do not know: Decode returns their header with
// no hits and no error, and leaves their body unread.
//
// Compatibility: the version changes only if the header changes. New types
// may be added (never renumbered), and new flag bits given a meaning that old
// receivers can safely ignore.

package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/limits"
)

// Hit is a tag's key and the hits served for it in one period: the
// table's own (bucket.Hit), so a report moves between the two without a
// copy.
type Hit = bucket.Hit

// MsgType is the kind of a datagram. Append-only: never renumber, never
// reuse a retired number.
type MsgType uint8

// The message types. Receivers ignore types they do not know.
const (
	MsgHits      MsgType = 1 // body: tag → hits
	MsgHeartbeat MsgType = 2 // a period with no hits; body: empty map
	// 3 and 4 are the warm start messages, in snapshot.go; 5 lists
	// peers, in peers.go; 6, 7 and 8 relay hits, in relay.go; 9 carries
	// a node's heaviest tags, in top.go; 10 asks for datagrams again, in
	// repair.go; 11 says goodbye, in goodbye.go; 12 carries hits under
	// limits callers stated, in stated.go.
)

// version is the wire format version this code writes. Decode accepts only
// it, and reports ErrVersion for any other.
const version = 1

// Header is what every datagram carries. A plain value, safe to copy.
type Header struct {
	Type        MsgType
	Node        uint64    // sender's random id, new every process start
	Seq         uint64    // per sender, +1 per datagram, starting at 1
	Sent        time.Time // sender's clock, millisecond precision on the wire
	Fingerprint uint64    // of the sender's policies
	Relayed     bool      // flag bit 1: the sender reports through relays it hears
}

// Message is one decoded datagram. It shares no memory with the bytes it
// was decoded from; its zero value is no datagram.
type Message struct {
	Header
	// Hits holds, for MsgHits and the relay types (6, 7, 8), the body's
	// entries in wire order; never an empty key or a zero count. Nil for
	// every other type.
	Hits []Hit
	// Snapshot holds the body of a MsgSnapshot; nil for every other type.
	Snapshot *Snapshot
	// Peers holds, for MsgPeers, the addresses listed, "ip:port".
	Peers []string
	// Top holds the body of a MsgTop; nil for every other type.
	Top *TopReport
	// Repair holds the body of a MsgRepair; nil for every other type.
	Repair *Repair
}

// Errors returned by Decode, to be tested with errors.Is.
var (
	ErrMalformed = errors.New("wire: malformed datagram")
	ErrVersion   = errors.New("wire: unsupported version")
	ErrAuth      = errors.New("wire: bad or missing mac")
)

const (
	headerLen = 37
	macLen    = sha256.Size
	flagMAC   = 1 << 0
	// flagRelayed marks a sender that reports through relays when it
	// hears one: receivers expect its silence.
	flagRelayed = 1 << 1
)

// MinPacket and MaxPacket bound a datagram's size (Encoder.MaxPacket):
// about the smallest datagram every IPv4 host accepts, and the largest UDP
// payload. Since an entry takes at least 3 bytes, a datagram holds fewer
// than 2^16 of them and a map16 header always suffices.
const (
	MinPacket = limits.MinPacket
	MaxPacket = limits.MaxPacket
)

var (
	errShort     = fmt.Errorf("%w: shorter than the header", ErrMalformed)
	errMagic     = fmt.Errorf("%w: bad magic", ErrMalformed)
	errShortMAC  = fmt.Errorf("%w: too short for its mac", ErrMalformed)
	errNotMap    = fmt.Errorf("%w: body is not a map", ErrMalformed)
	errMapLen    = fmt.Errorf("%w: map longer than the body", ErrMalformed)
	errTruncated = fmt.Errorf("%w: body truncated", ErrMalformed)
	errKey       = fmt.Errorf("%w: key is not str or bin", ErrMalformed)
	errCount     = fmt.Errorf("%w: count is not an integer in [0, 2^32)", ErrMalformed)
	errTrailing  = fmt.Errorf("%w: bytes after the body", ErrMalformed)
	errHeartbeat = fmt.Errorf("%w: heartbeat with entries", ErrMalformed)
	errNoMAC     = fmt.Errorf("%w: datagram has none", ErrAuth)
)

// Encoder turns reports into datagrams. Its zero value is not usable: set
// Node and MaxPacket (and Fingerprint, Key) before the first Encode. Not safe
// for concurrent use.
type Encoder struct {
	Node        uint64 // sender id, random per process start; not 0
	Fingerprint uint64 // of the sender's policies
	MaxPacket   int    // bytes per datagram, in [MinPacket, MaxPacket]
	Key         []byte // HMAC-SHA256 key; nil or empty sends no MAC
	Relayed     bool   // set flag bit 1: this sender reports through relays

	seq    uint64
	buf    []byte
	mac    hash.Hash
	macKey []byte // the Key that mac was built with
}

// Seq is the sequence number of the last datagram sent, 0 before the
// first.
func (e *Encoder) Seq() uint64 { return e.seq }

// Encode emits the hits as one or more self-contained MsgHits datagrams,
// each at most MaxPacket bytes and each with the next Seq, packed in the
// order given; or as one MsgHeartbeat when no hit is sent. Hits with an empty
// key or a zero count are dropped. A hit too long to fit in a datagram on its
// own cannot be sent: it is skipped and counted in skipped.
//
// emit must not retain pkt: its buffer is reused. If emit returns an error,
// Encode stops and returns it; the remaining hits are not sent.
func (e *Encoder) Encode(now time.Time, hits []Hit, emit func(pkt []byte) error) (skipped int, err error) {
	return e.encode(now, MsgHits, MsgHeartbeat, hits, emit)
}

// encode emits hits as datagrams of type t, or one empty datagram of type
// empty when no hit is sent (none if empty is 0).
func (e *Encoder) encode(now time.Time, t, empty MsgType, hits []Hit, emit func(pkt []byte) error) (skipped int, err error) {
	if err := e.prepare(); err != nil {
		return 0, err
	}
	trailer := 0
	if len(e.Key) > 0 {
		trailer = macLen
	}
	ms := uint64(now.UnixMilli())
	sent := false
	for pass := range 2 {
		// Plain hits as t, then, in datagrams of their own, the hits
		// under stated limits (stated.go): only a report carries them.
		withQuota := pass == 1
		if withQuota && t != MsgHits {
			break
		}
		typ := t
		if withQuota {
			typ = MsgStatedHits
		}
		n, err := e.encodePass(ms, typ, withQuota, trailer, hits, &skipped, emit)
		if err != nil {
			return skipped, err
		}
		sent = sent || n > 0
	}
	if !sent && empty != 0 {
		buf := append(e.buf[:headerLen], msgpcode.FixedMapLow)
		if err := emit(e.seal(buf, empty, ms)); err != nil {
			return skipped, err
		}
	}
	return skipped, nil
}

// encodePass emits the hits with a stated limit (withQuota) or without
// as datagrams of type t, and returns how many datagrams it emitted.
func (e *Encoder) encodePass(ms uint64, t MsgType, withQuota bool, trailer int, hits []Hit, skipped *int, emit func(pkt []byte) error) (int, error) {
	datagrams := 0
	for i := 0; i < len(hits); {
		// The body starts after room for a map16 header; a fixmap header
		// moves it back by two bytes once the count is known.
		buf := e.buf[:headerLen+3]
		n := 0
		for ; i < len(hits); i++ {
			h := hits[i]
			if h.Key == "" || h.Count == 0 || stated(h.Quota) != withQuota {
				continue
			}
			size := headerLen + mapHeaderLen(n+1) + (len(buf) - headerLen - 3) + entryLen(h) + trailer
			if withQuota {
				size += 1 + quotaLen(h.Quota)
			}
			if size > e.MaxPacket {
				if n == 0 {
					*skipped++
					continue
				}
				break
			}
			buf = appendStr(buf, h.Key)
			if withQuota {
				buf = append(buf, msgpcode.FixedArrayLow|5)
			}
			buf = appendUint(buf, h.Count)
			if withQuota {
				buf = appendQuota(buf, h.Quota)
			}
			n++
		}
		if n == 0 {
			break
		}
		if n < 16 {
			buf[headerLen] = msgpcode.FixedMapLow | byte(n)
			buf = append(buf[:headerLen+1], buf[headerLen+3:]...)
		} else {
			buf[headerLen] = msgpcode.Map16
			binary.BigEndian.PutUint16(buf[headerLen+1:], uint16(n))
		}
		if err := emit(e.seal(buf, t, ms)); err != nil {
			return datagrams, err
		}
		datagrams++
	}
	return datagrams, nil
}

// prepare checks the fields and sizes the buffers.
func (e *Encoder) prepare() error {
	if e.Node == 0 {
		return errors.New("wire: Encoder.Node must be set")
	}
	if e.MaxPacket < MinPacket || e.MaxPacket > MaxPacket {
		return fmt.Errorf("wire: Encoder.MaxPacket is %d, must be in [%d, %d]", e.MaxPacket, MinPacket, MaxPacket)
	}
	if cap(e.buf) < e.MaxPacket {
		e.buf = make([]byte, 0, e.MaxPacket)
	}
	if len(e.Key) == 0 {
		e.mac, e.macKey = nil, nil
	} else if e.mac == nil || !bytes.Equal(e.macKey, e.Key) {
		e.macKey = bytes.Clone(e.Key)
		e.mac = hmac.New(sha256.New, e.macKey)
	}
	return nil
}

// seal writes the header in front of the body in buf, with the next
// sequence number, and appends the MAC.
func (e *Encoder) seal(buf []byte, t MsgType, ms uint64) []byte {
	e.seq++
	buf[0], buf[1], buf[2], buf[3] = 'D', 'T', version, byte(t)
	buf[4] = 0
	if e.mac != nil {
		buf[4] |= flagMAC
	}
	if e.Relayed {
		buf[4] |= flagRelayed
	}
	binary.BigEndian.PutUint64(buf[5:], e.Node)
	binary.BigEndian.PutUint64(buf[13:], e.seq)
	binary.BigEndian.PutUint64(buf[21:], ms)
	binary.BigEndian.PutUint64(buf[29:], e.Fingerprint)
	if e.mac != nil {
		e.mac.Reset()
		e.mac.Write(buf)
		buf = e.mac.Sum(buf)
	}
	return buf[:len(buf):len(buf)] // an append by emit cannot reach e.buf
}

// mapHeaderLen is the size of a msgpack map header for n entries.
func mapHeaderLen(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	default:
		return 5
	}
}

// entryLen is the exact encoded size of one map entry.
func entryLen(h Hit) int {
	n := len(h.Key)
	switch {
	case n < 32:
		n++
	case n <= math.MaxUint8:
		n += 2
	case n <= math.MaxUint16:
		n += 3
	default:
		n += 5
	}
	switch {
	case h.Count <= 0x7f:
		return n + 1
	case h.Count <= math.MaxUint8:
		return n + 2
	case h.Count <= math.MaxUint16:
		return n + 3
	default:
		return n + 5
	}
}

// appendStr appends s as a msgpack str: fixstr, str8, str16 or str32.
func appendStr[T string | []byte](b []byte, s T) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, msgpcode.FixedStrLow|byte(n))
	case n <= math.MaxUint8:
		b = append(b, msgpcode.Str8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, msgpcode.Str16, byte(n>>8), byte(n))
	default:
		b = append(b, msgpcode.Str32)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

// appendUint appends v in its smallest msgpack unsigned encoding.
func appendUint(b []byte, v uint32) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, msgpcode.Uint8, byte(v))
	case v <= math.MaxUint16:
		return append(b, msgpcode.Uint16, byte(v>>8), byte(v))
	default:
		b = append(b, msgpcode.Uint32)
		return binary.BigEndian.AppendUint32(b, v)
	}
}
