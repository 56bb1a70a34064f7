package h2unary

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// TestAppendInt: HPACK's integers, RFC 7541's examples (C.1) and the
// edges of a prefix.
func TestAppendInt(t *testing.T) {
	for _, tc := range []struct {
		n    uint
		i    uint64
		want []byte
	}{
		{5, 10, []byte{0x0a}},
		{5, 1337, []byte{0x1f, 0x9a, 0x0a}},
		{8, 42, []byte{0x2a}},
		{4, 14, []byte{0x0e}},
		{4, 15, []byte{0x0f, 0x00}},
		{7, 127, []byte{0x7f, 0x00}},
		{7, 128, []byte{0x7f, 0x01}},
	} {
		if got := appendInt(nil, 0, tc.n, tc.i); !bytes.Equal(got, tc.want) {
			t.Errorf("%d on a %d-bit prefix: % x, want % x", tc.i, tc.n, got, tc.want)
		}
	}
}

// TestHeaderBlocks: the blocks the server sends decode to their fields,
// and leave HPACK's dynamic table as empty as it was: every literal is
// one the decoder does not keep. A status's message is percent-encoded
// and cut at maxStatusMessage bytes.
func TestHeaderBlocks(t *testing.T) {
	msg := "100% sûr\n" + string(make([]byte, 2*maxStatusMessage))
	b := appendStatus(nil, 200, codes.Unavailable, msg)
	for _, tc := range []struct {
		name  string
		block []byte
		want  string
	}{
		{"headers", okHeaders, ":status=200 content-type=application/grpc"},
		{"trailers", okTrailers, "grpc-status=0"},
		{"trailers only", b, ":status=200 content-type=application/grpc grpc-status=14 grpc-message=100%25 s%C3%BBr%0A" +
			string(bytes.Repeat([]byte("%00"), maxStatusMessage-len("100% sûr\n")))},
		{"415", appendStatus(nil, 415, codes.Internal, ""), ":status=415 content-type=application/grpc grpc-status=13"},
	} {
		d := hpack.NewDecoder(initialTableSize, nil)
		fields, err := d.DecodeFull(tc.block)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, f := range fields {
			got = append(got, f.Name+"="+f.Value)
		}
		if s := fmt.Sprint(got); s != "["+tc.want+"]" {
			t.Errorf("%s: %s\nwant [%s]", tc.name, s, tc.want)
		}
		// The first entry of the dynamic table, index 62, is still not there.
		if _, err := d.DecodeFull([]byte{0x80 | 62}); err == nil {
			t.Errorf("%s: the block added to the dynamic table", tc.name)
		}
	}
}
