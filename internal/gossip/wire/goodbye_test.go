package wire

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestGoodbyeGolden pins MsgGoodbye to testdata/golden_goodbye.hex, both
// ways: the bytes docs/wire-format.md shows.
func TestGoodbyeGolden(t *testing.T) {
	want := readHex(t, "testdata/golden_goodbye.hex")
	e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = 42
	var got []byte
	if err := e.EncodeGoodbye(time.UnixMilli(1767225600000), func(p []byte) error {
		got = slices.Clone(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("EncodeGoodbye:\n%x\nwant testdata/golden_goodbye.hex:\n%x", got, want)
	}
	m, err := Decode(want, []byte("secret"))
	if err != nil || m.Type != MsgGoodbye || m.Seq != 43 || m.Node != 0x0102030405060708 || m.Hits != nil {
		t.Fatalf("Decode(golden) = %+v, %v", m, err)
	}
	if _, err := Decode(want, []byte("another secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("Decode under another key: %v, want ErrAuth", err)
	}
	if _, err := Decode(want[:len(want)-1], []byte("secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("Decode of a truncated goodbye: %v, want ErrAuth", err)
	}
	if _, err := Decode(want[:20], []byte("secret")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Decode of a goodbye cut in its header: %v, want ErrMalformed", err)
	}
}
