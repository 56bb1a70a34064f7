package spoe

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestVarint(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}},
		{239, []byte{239}},
		{240, []byte{0xf0, 0x00}},
		{2287, []byte{0xff, 0x7f}},
		{2288, []byte{0xf0, 0x80, 0x00}},
		{264431, []byte{0xff, 0xff, 0x7f}},
		{264432, []byte{0xf0, 0x80, 0x80, 0x00}},
	} {
		got := appendVarint(nil, tc.v)
		if !bytes.Equal(got, tc.want) {
			t.Errorf("appendVarint(%d) = % x, want % x", tc.v, got, tc.want)
		}
		v, n, err := readVarint(append(got, 0xaa))
		if err != nil || v != tc.v || n != len(tc.want) {
			t.Errorf("readVarint(% x) = %d, %d, %v; want %d, %d", got, v, n, err, tc.v, len(tc.want))
		}
	}
	for _, v := range []uint64{1 << 20, 1<<32 - 1, 1 << 32, 1<<63 + 12345, math.MaxUint64} {
		b := appendVarint(nil, v)
		if got, n, err := readVarint(b); err != nil || got != v || n != len(b) || n > maxVarintLen {
			t.Errorf("%d: round trip gave %d, %d bytes, %v", v, got, n, err)
		}
	}
}

func TestVarintBad(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShort},
		{"cut after the first byte", []byte{0xf0}, errShort},
		{"cut in the middle", []byte{0xf0, 0x80, 0x80}, errShort},
		{"longer than 10 bytes", bytes.Repeat([]byte{0xff}, 11), errBad},
		{"past 64 bits", append(bytes.Repeat([]byte{0xff}, 9), 0x7f), errBad},
	} {
		if _, _, err := readVarint(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: readVarint(% x) error %v, want %v", tc.name, tc.b, err, tc.want)
		}
	}
}

func TestReadValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want value
		n    int
	}{
		{"null", []byte{typeNull}, value{typ: typeNull}, 1},
		{"true", []byte{typeBool | boolTrue}, value{typ: typeBool, num: 1}, 1},
		{"false", []byte{typeBool}, value{typ: typeBool}, 1},
		{"int32", []byte{typeInt32, 5}, value{typ: typeInt32, num: 5}, 2},
		{"uint64", []byte{typeUint64, 0xf0, 0x00}, value{typ: typeUint64, num: 240}, 3},
		{"ipv4", []byte{typeIPv4, 192, 0, 2, 1}, value{typ: typeIPv4, bytes: []byte{192, 0, 2, 1}}, 5},
		{"string", []byte{typeString, 2, 'h', 'i'}, value{typ: typeString, bytes: []byte("hi")}, 4},
		{"binary", []byte{typeBinary, 0}, value{typ: typeBinary, bytes: []byte{}}, 2},
	} {
		v, n, err := readValue(append(tc.b, 0xee))
		if err != nil || n != tc.n || v.typ != tc.want.typ || v.num != tc.want.num || !bytes.Equal(v.bytes, tc.want.bytes) {
			t.Errorf("%s: readValue = %+v, %d, %v; want %+v, %d", tc.name, v, n, err, tc.want, tc.n)
		}
	}
	for _, b := range [][]byte{{}, {typeIPv4, 1, 2, 3}, {typeIPv6, 1}, {typeString, 5, 'a'}, {typeInt32}, {10}, {15}} {
		if _, _, err := readValue(b); err == nil {
			t.Errorf("readValue(% x) accepted", b)
		}
	}
}

func TestReadMessages(t *testing.T) {
	p := appendString(nil, "m1")
	p = append(p, 2)
	p = append(p, kvList(kv{"tag", str("a")}, kv{"", u32(7)})...)
	p = appendString(p, "m2")
	p = append(p, 0)
	msgs, err := readMessages(p, nil)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("readMessages = %d messages, %v", len(msgs), err)
	}
	if string(msgs[0].name) != "m1" || len(msgs[0].args) != 2 || string(msgs[0].args[0].v.bytes) != "a" || msgs[0].args[1].v.num != 7 {
		t.Errorf("first message %+v", msgs[0])
	}
	if string(msgs[1].name) != "m2" || len(msgs[1].args) != 0 {
		t.Errorf("second message %+v", msgs[1])
	}
	// Every cut of a valid payload is an error, never a panic.
	for i := range len(p) {
		if i == len(appendString(nil, "m1"))+1+len(kvList(kv{"tag", str("a")}, kv{"", u32(7)})) {
			continue // a cut between the two messages is a valid list of one
		}
		if _, err := readMessages(p[:i], msgs); err == nil && i > 0 {
			t.Errorf("cut at %d of %d accepted", i, len(p))
		}
	}
}

func TestAppendDisconnect(t *testing.T) {
	b := appendDisconnect(nil, statusTooBig)
	h, off, err := readHeader(b[4:])
	if err != nil || h.typ != frameAgentDisconnect || h.flags != flagFin || h.streamID != 0 || h.frameID != 0 {
		t.Fatalf("header %+v, %v", h, err)
	}
	m := map[string]value{}
	if err := readKV(b[4+off:], func(n []byte, v value) { m[string(n)] = v }); err != nil {
		t.Fatal(err)
	}
	if m["status-code"].num != statusTooBig || string(m["message"].bytes) != "frame is too big" {
		t.Errorf("payload %+v", m)
	}
}
