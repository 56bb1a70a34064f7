package havarint

import (
	"bytes"
	"testing"
)

func TestVarint(t *testing.T) {
	// The boundaries of HAProxy's doc/peers-v2.0.txt, and 60000 as HAProxy
	// 2.6 writes a 60 s expire (internal/ways/hapeers/testdata).
	for _, tc := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}}, {239, []byte{239}}, {240, []byte{0xf0, 0}}, {2287, []byte{0xff, 0x7f}},
		{2288, []byte{0xf0, 0x80, 0}}, {264431, []byte{0xff, 0xff, 0x7f}}, {264432, []byte{0xf0, 0x80, 0x80, 0}},
		{60000, []byte{0xf0, 0x97, 0x1c}},
	} {
		if got := Append(nil, tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("Append(%d) = % x, want % x", tc.v, got, tc.want)
		}
		if v, n, err := Read(tc.want); v != tc.v || n != len(tc.want) || err != nil {
			t.Errorf("Read(% x) = %d, %d, %v; want %d, %d", tc.want, v, n, err, tc.v, len(tc.want))
		}
	}
	for _, v := range []uint64{1 << 32, 1<<63 + 5, ^uint64(0)} {
		b := Append(nil, v)
		if got, n, err := Read(b); got != v || n != len(b) || err != nil {
			t.Errorf("Read(Append(%d)) = %d, %d, %v", v, got, n, err)
		}
		if _, _, err := Read(b[:len(b)-1]); err != ErrShort {
			t.Errorf("Read of %d cut short: %v, want ErrShort", v, err)
		}
	}
	// Eleven bytes, or ten past 64 bits, are never an integer.
	for _, b := range [][]byte{bytes.Repeat([]byte{0xff}, 11), append(bytes.Repeat([]byte{0xff}, 9), 0x7f)} {
		if _, _, err := Read(b); err != ErrBad {
			t.Errorf("Read(% x): %v, want ErrBad", b, err)
		}
	}
}
