package spoe

import (
	"encoding/binary"
	"errors"

	"github.com/dthrottle/dthrottle/internal/ways/havarint"
)

// The SPOP wire format, version 2.0, as HAProxy's doc/SPOE.txt (section 3)
// gives it. Every frame is <length:4 bytes, big endian><frame>, and a
// frame is <type:1><flags:4, big endian><stream-id:varint><frame-id:varint>
// <payload>. These numbers are the protocol's: never renumber them.

// Frame types.
const (
	frameUnset           = 0 // a fragment after the first
	frameHAProxyHello    = 1
	frameHAProxyDisconn  = 2
	frameNotify          = 3
	frameAgentHello      = 101
	frameAgentDisconnect = 102
	frameAck             = 103
)

// Frame flags.
const (
	flagFin   = 1 // the last (or only) fragment of a payload
	flagAbort = 2 // the fragmented payload is abandoned
)

// Typed data: the type in the low 4 bits, flags in the high 4.
const (
	typeNull   = 0
	typeBool   = 1
	typeInt32  = 2
	typeUint32 = 3
	typeInt64  = 4
	typeUint64 = 5
	typeIPv4   = 6
	typeIPv6   = 7
	typeString = 8
	typeBinary = 9
	typeMask   = 0x0f
	boolTrue   = 0x10 // the flag of a true boolean
)

// Actions of an ACK and the scopes of their variables.
const (
	actionSetVar = 1
	scopeTxn     = 2
)

// Status codes of a DISCONNECT frame.
const (
	statusNormal      = 0
	statusIO          = 1
	statusTimeout     = 2
	statusTooBig      = 3
	statusInvalid     = 4
	statusNoVersion   = 5
	statusNoFrameSize = 6
	statusNoCaps      = 7
	statusBadVersion  = 8
	statusBadSize     = 9
	statusNoFragments = 10
	statusResources   = 13
)

// statusMessages are the messages sent with each status.
var statusMessages = map[int]string{
	statusNormal:      "normal",
	statusIO:          "I/O error",
	statusTimeout:     "a timeout occurred",
	statusTooBig:      "frame is too big",
	statusInvalid:     "invalid frame received",
	statusNoVersion:   "version value not found",
	statusNoFrameSize: "max-frame-size value not found",
	statusNoCaps:      "capabilities value not found",
	statusBadVersion:  "unsupported version",
	statusBadSize:     "max-frame-size too big or too small",
	statusNoFragments: "payload fragmentation is not supported",
	statusResources:   "resource allocation error",
}

// errShort and errBad are what the decoders return for a buffer that ends
// too soon and for bytes that are not SPOP. Both end the connection with
// statusInvalid.
var (
	errShort = errors.New("spoe: truncated data")
	errBad   = errors.New("spoe: malformed data")
)

// maxVarintLen is the longest varint a uint64 needs.
const maxVarintLen = havarint.MaxLen

// appendVarint appends v in SPOP's varint encoding (that of HAProxy's
// peers, package havarint).
func appendVarint(b []byte, v uint64) []byte { return havarint.Append(b, v) }

// readVarint decodes a varint at the start of b and returns it with the
// bytes it took. A varint longer than maxVarintLen, or one whose value
// does not fit 64 bits, is errBad.
func readVarint(b []byte) (uint64, int, error) {
	v, n, err := havarint.Read(b)
	switch err {
	case havarint.ErrShort:
		return 0, 0, errShort
	case havarint.ErrBad:
		return 0, 0, errBad
	}
	return v, n, nil
}

// readBytes decodes a length-prefixed string (<length:varint><bytes>) at
// the start of b. The result shares b's memory.
func readBytes(b []byte) ([]byte, int, error) {
	n, k, err := readVarint(b)
	if err != nil {
		return nil, 0, err
	}
	if n > uint64(len(b)-k) {
		return nil, 0, errShort
	}
	return b[k : k+int(n)], k + int(n), nil
}

// value is one decoded typed datum. Bytes shares the frame's memory.
type value struct {
	typ   byte
	num   uint64 // the integer types and bool (0 or 1)
	bytes []byte // string, binary, ipv4 (4 bytes), ipv6 (16 bytes)
}

// readValue decodes a typed datum at the start of b.
func readValue(b []byte) (value, int, error) {
	if len(b) == 0 {
		return value{}, 0, errShort
	}
	v := value{typ: b[0] & typeMask}
	switch v.typ {
	case typeNull:
		return v, 1, nil
	case typeBool:
		if b[0]&boolTrue != 0 {
			v.num = 1
		}
		return v, 1, nil
	case typeInt32, typeUint32, typeInt64, typeUint64:
		n, k, err := readVarint(b[1:])
		v.num = n
		return v, 1 + k, err
	case typeIPv4, typeIPv6:
		size := 4
		if v.typ == typeIPv6 {
			size = 16
		}
		if len(b) < 1+size {
			return value{}, 0, errShort
		}
		v.bytes = b[1 : 1+size]
		return v, 1 + size, nil
	case typeString, typeBinary:
		s, k, err := readBytes(b[1:])
		v.bytes = s
		return v, 1 + k, err
	}
	return value{}, 0, errBad
}

// header is a frame's type and metadata.
type header struct {
	typ      byte
	flags    uint32
	streamID uint64
	frameID  uint64
}

// readHeader decodes the header of a frame (without its length prefix)
// and returns it with the offset of its payload.
func readHeader(f []byte) (header, int, error) {
	if len(f) < 5 {
		return header{}, 0, errShort
	}
	h := header{typ: f[0], flags: binary.BigEndian.Uint32(f[1:5])}
	off := 5
	var k int
	var err error
	if h.streamID, k, err = readVarint(f[off:]); err != nil {
		return header{}, 0, err
	}
	off += k
	if h.frameID, k, err = readVarint(f[off:]); err != nil {
		return header{}, 0, err
	}
	return h, off + k, nil
}

// readKV calls fn for each item of a KV-LIST (<name:string><value:typed>)
// that fills p exactly.
func readKV(p []byte, fn func(name []byte, v value)) error {
	for len(p) > 0 {
		name, k, err := readBytes(p)
		if err != nil {
			return err
		}
		v, n, err := readValue(p[k:])
		if err != nil {
			return err
		}
		fn(name, v)
		p = p[k+n:]
	}
	return nil
}

// message is one message of a NOTIFY frame, its arguments decoded.
type message struct {
	name []byte
	args []arg
}

// arg is one argument of a message; name is empty when the SPOE
// configuration gave it none.
type arg struct {
	name []byte
	v    value
}

// readMessages decodes a NOTIFY payload, a LIST-OF-MESSAGES
// (<name:string><nb-args:1><kv-list of nb-args items>...), into msgs,
// reusing their memory, and returns them.
func readMessages(p []byte, msgs []message) ([]message, error) {
	msgs = msgs[:0]
	for len(p) > 0 {
		name, k, err := readBytes(p)
		if err != nil {
			return msgs, err
		}
		p = p[k:]
		if len(p) == 0 {
			return msgs, errShort
		}
		nargs := int(p[0])
		p = p[1:]
		if len(msgs) < cap(msgs) {
			msgs = msgs[:len(msgs)+1]
		} else {
			msgs = append(msgs, message{})
		}
		m := &msgs[len(msgs)-1]
		m.name, m.args = name, m.args[:0]
		for range nargs {
			an, k, err := readBytes(p)
			if err != nil {
				return msgs, err
			}
			v, n, err := readValue(p[k:])
			if err != nil {
				return msgs, err
			}
			m.args = append(m.args, arg{an, v})
			p = p[k+n:]
		}
	}
	return msgs, nil
}

// beginFrame appends a frame's length prefix (filled in by endFrame) and
// header, unfragmented (FIN), and returns the offset endFrame needs.
func beginFrame(b []byte, typ byte, streamID, frameID uint64) ([]byte, int) {
	at := len(b)
	b = append(b, 0, 0, 0, 0, typ, 0, 0, 0, flagFin)
	b = appendVarint(b, streamID)
	return appendVarint(b, frameID), at
}

// endFrame writes the length of the frame begun at offset at.
func endFrame(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// appendString appends a length-prefixed string, untyped (a KV name, a
// variable name).
func appendString(b []byte, s string) []byte {
	return append(appendVarint(b, uint64(len(s))), s...)
}

// appendTypedString appends a typed string value.
func appendTypedString(b []byte, s []byte) []byte {
	b = append(b, typeString)
	return append(appendVarint(b, uint64(len(s))), s...)
}

// appendTypedUint32 appends a typed uint32 value.
func appendTypedUint32(b []byte, v uint32) []byte {
	return appendVarint(append(b, typeUint32), uint64(v))
}

// appendTypedInt32 appends a typed int32 value; v must not be negative.
func appendTypedInt32(b []byte, v int32) []byte {
	return appendVarint(append(b, typeInt32), uint64(v))
}

// appendDisconnect appends an AGENT-DISCONNECT frame with status and its
// message.
func appendDisconnect(b []byte, status int) []byte {
	b, at := beginFrame(b, frameAgentDisconnect, 0, 0)
	b = appendString(b, "status-code")
	b = appendTypedUint32(b, uint32(status))
	b = appendString(b, "message")
	b = appendTypedString(b, []byte(statusMessages[status]))
	return endFrame(b, at)
}
