package hapeers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/dthrottle/dthrottle/internal/ways/havarint"
)

// This file is the peers protocol byte by byte (HAProxy's
// doc/peers-v2.0.txt and src/peers.c): the integers, the hello lines and
// the messages, read and written. It knows nothing of connections.

// Message classes and types.
const (
	classControl    = 0
	classError      = 1
	classStickTable = 10
	classReserved   = 255

	ctrlResyncRequest  = 0
	ctrlResyncFinished = 1
	ctrlResyncPartial  = 2
	ctrlResyncConfirm  = 3
	ctrlHeartbeat      = 4

	// A stick-table message type with this bit set carries a length and
	// data.
	withData = 0x80

	msgUpdate         = 0x80 // an entry, with its update id
	msgIncUpdate      = 0x81 // an entry, its id the previous one's plus one
	msgDefine         = 0x82 // a table's definition; the following updates are its
	msgSwitch         = 0x83 // the following updates are the table's whose id this is
	msgAck            = 0x84 // the last update id the sender took of a table
	msgUpdateTimed    = 0x85 // msgUpdate with the entry's remaining lifetime
	msgIncUpdateTimed = 0x86 // msgIncUpdate with the entry's remaining lifetime
)

// Key types of a table's definition.
const (
	KeySInt   = 2
	KeyIPv4   = 4
	KeyIPv6   = 5
	KeyString = 6
	KeyBinary = 7
)

// Data types of HAProxy 2.6's stick tables, by their bit in a definition.
const (
	dtGPT0       = 1
	dtGPC0       = 2
	dtHTTPReqCnt = 9
	dtGPC1       = 17
	dtServerKey  = 19
	dtGPT        = 22
	dtGPC        = 23
	dtGPCRate    = 24
	numDataTypes = 25
)

// dataKind is how a data type's value is written in an update.
type dataKind uint8

const (
	kindInt  dataKind = iota // one integer
	kindFreq                 // a frequency counter: three integers
	kindDict                 // a length, then that many bytes
)

// kinds gives the kind of each data type HAProxy 2.6 knows; a definition
// with another bit set is refused, since its updates could not be read.
var kinds = [numDataTypes]dataKind{
	0: kindInt, 1: kindInt, 2: kindInt, 3: kindFreq, 4: kindInt, 5: kindFreq, 6: kindInt,
	7: kindInt, 8: kindFreq, 9: kindInt, 10: kindFreq, 11: kindInt, 12: kindFreq,
	13: kindInt, 14: kindFreq, 15: kindInt, 16: kindFreq, 17: kindInt, 18: kindFreq,
	19: kindDict, 20: kindInt, 21: kindFreq, 22: kindInt, 23: kindInt, 24: kindFreq,
}

// isArray reports whether data type t holds an array, whose length the
// definition gives.
func isArray(t int) bool { return t == dtGPT || t == dtGPC || t == dtGPCRate }

// Limits of what is read.
const (
	// MaxMessage is the longest message data accepted: HAProxy's own
	// buffer (tune.bufsize, 16 KiB by default) bounds what it sends.
	MaxMessage = 64 << 10
	// maxLine is the longest hello line accepted.
	maxLine = 256
	// maxArray is the most elements of an array data type accepted.
	maxArray = 100
	// maxKeyLen is the longest key a definition may announce.
	maxKeyLen = 1 << 12
)

// Errors of the decoder.
var (
	errTooLong   = errors.New("hapeers: message longer than the limit")
	errMalformed = errors.New("hapeers: malformed message")
)

// appendVarint appends v in the protocol's variable-length encoding.
func appendVarint(b []byte, v uint64) []byte { return havarint.Append(b, v) }

// varint reads an integer at the start of b: its value and its length,
// or a length of 0 when b ends first or the integer is too long.
func varint(b []byte) (uint64, int) {
	v, n, err := havarint.Read(b)
	if err != nil {
		return 0, 0
	}
	return v, n
}

// reader reads a message's data, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := varint(r.b)
	if n == 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errMalformed
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Message is one message as framed: its class, its type, and its data
// (nil without). Data aliases the buffer it was read from.
type Message struct {
	Class, Type byte
	Data        []byte
}

// Decode reads one message at the start of b. It returns the message and
// its length, a length of 0 when b does not hold it whole yet, or an error
// for a message that can never be read (a length over MaxMessage or
// longer than 5 bytes).
func Decode(b []byte) (Message, int, error) {
	if len(b) < 2 {
		return Message{}, 0, nil
	}
	m := Message{Class: b[0], Type: b[1]}
	if m.Class != classStickTable || m.Type&withData == 0 {
		return m, 2, nil
	}
	n, k := varint(b[2:])
	if k == 0 {
		if len(b) >= 2+5 {
			return Message{}, 0, errTooLong
		}
		return Message{}, 0, nil
	}
	if k > 5 || n > MaxMessage {
		return Message{}, 0, errTooLong
	}
	end := 2 + k + int(n)
	if len(b) < end {
		return Message{}, 0, nil
	}
	m.Data = b[2+k : end]
	return m, end, nil
}

// Definition is a table as a peer defines it.
type Definition struct {
	ID      uint64 // the sender's id for the table
	Name    string // the table's name on the wire: "web", or "/web" for a table of a peers section
	KeyType uint64 // KeySInt ... KeyBinary
	KeyLen  uint64 // the key's size, or most bytes of a string key
	Data    uint64 // the data types, a bit each
	Expire  uint64 // an entry's lifetime in ms, 0 when the peer sent none
	// Elems gives the length of each array data type.
	Elems [numDataTypes]uint64
}

// has reports whether the definition carries data type t.
func (d *Definition) has(t int) bool { return d.Data&(1<<t) != 0 }

// DecodeDefinition reads a definition message's data. A definition with
// a data type HAProxy 2.6 does not know, or without the parameters of its
// arrays, is an error: its updates could not be read.
func DecodeDefinition(data []byte) (Definition, error) {
	r := reader{b: data}
	var d Definition
	d.ID = r.varint()
	name := r.bytes(r.varint())
	d.Name = string(name)
	d.KeyType = r.varint()
	d.KeyLen = r.varint()
	d.Data = r.varint()
	if r.err != nil || len(name) == 0 {
		return Definition{}, errMalformed
	}
	if d.Data>>numDataTypes != 0 {
		return Definition{}, fmt.Errorf("hapeers: table %q: unknown data types %#x", d.Name, d.Data>>numDataTypes<<numDataTypes)
	}
	if d.KeyLen > maxKeyLen {
		return Definition{}, fmt.Errorf("hapeers: table %q: key length %d over %d", d.Name, d.KeyLen, maxKeyLen)
	}
	if len(r.b) == 0 {
		for t := range numDataTypes {
			if d.has(t) && isArray(t) {
				return Definition{}, fmt.Errorf("hapeers: table %q: array without its length", d.Name)
			}
		}
		return d, nil
	}
	d.Expire = r.varint()
	for t := range numDataTypes {
		if !d.has(t) || (!isArray(t) && kinds[t] != kindFreq) {
			continue
		}
		if r.varint() != uint64(t) {
			r.err = errMalformed
		}
		if isArray(t) {
			d.Elems[t] = r.varint()
			if d.Elems[t] == 0 || d.Elems[t] > maxArray {
				r.err = errMalformed
			}
		}
		if kinds[t] == kindFreq {
			r.varint() // the period
		}
	}
	if r.err != nil {
		return Definition{}, fmt.Errorf("hapeers: table %q: bad data type parameters", d.Name)
	}
	return d, nil
}

// AppendDefinition appends a definition message of d: the sender's id,
// name, key and the data types; an expire, and the parameters of the
// frequency counters and arrays, are not sent (dthrottled defines only
// plain integers).
func AppendDefinition(b []byte, d Definition) []byte {
	var data []byte
	data = appendVarint(data, d.ID)
	data = appendVarint(data, uint64(len(d.Name)))
	data = append(data, d.Name...)
	data = appendVarint(data, d.KeyType)
	data = appendVarint(data, d.KeyLen)
	data = appendVarint(data, d.Data)
	return appendMessage(b, msgDefine, data)
}

// appendMessage appends a stick-table message of type typ with data.
func appendMessage(b []byte, typ byte, data []byte) []byte {
	b = append(b, classStickTable, typ)
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

// appendControl appends a control message of type typ.
func appendControl(b []byte, typ byte) []byte { return append(b, classControl, typ) }

// AppendAck appends an ack of the updates of the peer's table id up to
// update.
func AppendAck(b []byte, id uint64, update uint32) []byte {
	var data [15]byte
	d := appendVarint(data[:0], id)
	d = binary.BigEndian.AppendUint32(d, update)
	return appendMessage(b, msgAck, d)
}

// Update is an entry as a peer sends it: its key and the values of the
// data types this package reads.
type Update struct {
	ID    uint32 // the update's id: given, or the previous one's plus one
	HasID bool   // the message gave ID
	Key   []byte // the key's bytes as sent (a string without its length); aliases the message
	// Values holds each integer data type's value (an array's first
	// element); the others are read past.
	Values [numDataTypes]uint64
}

// DecodeUpdate reads the data of an update message of type typ for the
// table d.
func DecodeUpdate(typ byte, data []byte, d *Definition) (Update, error) {
	r := reader{b: data}
	var u Update
	if typ == msgUpdate || typ == msgUpdateTimed {
		u.ID, u.HasID = r.u32(), true
	}
	if typ == msgUpdateTimed || typ == msgIncUpdateTimed {
		r.u32() // the entry's remaining lifetime
	}
	switch d.KeyType {
	case KeyString:
		n := r.varint()
		if n > d.KeyLen {
			return Update{}, errMalformed
		}
		u.Key = r.bytes(n)
	case KeySInt:
		u.Key = r.bytes(4)
	default:
		u.Key = r.bytes(d.KeyLen)
	}
	for t := range numDataTypes {
		if !d.has(t) {
			continue
		}
		n := uint64(1)
		if isArray(t) {
			n = d.Elems[t]
		}
		for i := range n {
			switch kinds[t] {
			case kindInt:
				v := r.varint()
				if i == 0 {
					u.Values[t] = v
				}
			case kindFreq:
				r.varint()
				r.varint()
				r.varint()
			case kindDict:
				r.bytes(r.varint())
			}
		}
	}
	if r.err != nil {
		return Update{}, r.err
	}
	return u, nil
}

// AppendUpdate appends an update message with an id for the table d
// (whose data types are all plain integers): key as the table's key type
// writes it, then values, one per data type of d in order.
func AppendUpdate(b []byte, d *Definition, id uint32, key []byte, values []uint64) []byte {
	var data []byte
	data = binary.BigEndian.AppendUint32(data, id)
	if d.KeyType == KeyString {
		data = appendVarint(data, uint64(len(key)))
	}
	data = append(data, key...)
	for _, v := range values {
		data = appendVarint(data, v)
	}
	return appendMessage(b, msgUpdate, data)
}

// Hello is the first thing a connecting peer sends: three lines.
type Hello struct {
	Major, Minor int    // the protocol's version: 2.0 or 2.1
	To           string // the name the sender gives the receiver
	From         string // the sender's own name
	PID          int    // the sender's process id
}

// Status codes of the answer to a hello.
const (
	statusOK         = 200
	statusProtocol   = 501
	statusVersion    = 502
	statusLocalName  = 503 // the hello names another peer than the receiver
	statusRemoteName = 504 // the sender is not a peer the receiver knows
)

// readHelloLine takes one line of at most maxLine bytes off the front of
// b: the line and the rest, or ok false when b holds no whole line yet.
func readHelloLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	return b[:i], b[i+1:], true
}

// ParseHello reads a hello's three lines (without their newlines). It
// returns the status to answer when they do not parse: statusProtocol, or
// statusVersion for a version other than 2.0 and 2.1.
func ParseHello(proto, to, from []byte) (Hello, int) {
	var h Hello
	name, ver, ok := bytes.Cut(proto, []byte(" "))
	if !ok || string(name) != "HAProxyS" {
		return h, statusProtocol
	}
	maj, min, ok := bytes.Cut(ver, []byte("."))
	var err1, err2 error
	h.Major, err1 = strconv.Atoi(string(maj))
	h.Minor, err2 = strconv.Atoi(string(min))
	if !ok || err1 != nil || err2 != nil || h.Major != 2 || h.Minor < 0 || h.Minor > 1 {
		return h, statusVersion
	}
	h.To = string(to)
	id, rest, ok := bytes.Cut(from, []byte(" "))
	if !ok || len(id) == 0 {
		return h, statusProtocol
	}
	h.From = string(id)
	pid, _, _ := bytes.Cut(rest, []byte(" "))
	h.PID, _ = strconv.Atoi(string(pid))
	return h, statusOK
}
