// Package havarint is the variable-length integer of HAProxy's protocols,
// written once for both that dthrottled speaks: SPOP (package spoe) and
// the peers protocol (package hapeers). Below 240 a value is one byte;
// otherwise a first byte holds 4 more bits, then 7 bits a byte follow,
// the high bit set on all but the last (HAProxy's doc/peers-v2.0.txt,
// "Encoded Integer", and doc/SPOE.txt, 3.1).
package havarint

import "errors"

// MaxLen is the longest encoding of a uint64: one byte of 4 bits, then 7
// bits a byte.
const MaxLen = 10

// Errors of Read: ErrShort for bytes that end inside the integer, ErrBad
// for an encoding longer than MaxLen or a value past 64 bits.
var (
	ErrShort = errors.New("havarint: truncated integer")
	ErrBad   = errors.New("havarint: integer too long")
)

// Append appends v's encoding to b.
func Append(b []byte, v uint64) []byte {
	if v < 240 {
		return append(b, byte(v))
	}
	b = append(b, byte(v)|240)
	v = (v - 240) >> 4
	for v >= 128 {
		b = append(b, byte(v)|128)
		v = (v - 128) >> 7
	}
	return append(b, byte(v))
}

// Read decodes the integer at the start of b: its value and the bytes it
// took.
func Read(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, ErrShort
	}
	v := uint64(b[0])
	if v < 240 {
		return v, 1, nil
	}
	shift := uint(4)
	for i := 1; ; i++ {
		if i >= MaxLen {
			return 0, 0, ErrBad
		}
		if i >= len(b) {
			return 0, 0, ErrShort
		}
		c := uint64(b[i])
		add := c << shift
		if add>>shift != c || v+add < v {
			return 0, 0, ErrBad
		}
		v += add
		shift += 7
		if c < 128 {
			return v, i + 1, nil
		}
	}
}
