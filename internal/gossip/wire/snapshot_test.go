// Tests of the warm start messages: the golden vectors of an answer and a
// request, and answers that are not well formed.

package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// snapshotGolden is the answer in testdata/golden_snapshot.hex, sent with
// key "secret".
var snapshotGolden = Message{
	Header: Header{Type: MsgSnapshot, Node: 0x0102030405060708, Seq: 1, Sent: time.UnixMilli(1767225600000), Fingerprint: 0x1122334455667788},
	Snapshot: &Snapshot{To: 0x1111111111111111, Last: true, Levels: []Level{
		{Key: []byte("203.0.113.7"), Tokens: 2.5}, {Key: []byte("login:bob"), Tokens: -3}}},
}

func readHex(t testing.TB, path string) []byte {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func TestSnapshotGolden(t *testing.T) {
	golden := readHex(t, "testdata/golden_snapshot.hex")
	e := &Encoder{Node: snapshotGolden.Node, Fingerprint: snapshotGolden.Fingerprint, MaxPacket: 1400, Key: []byte("secret")}
	var got []byte
	e.EncodeSnapshot(snapshotGolden.Sent, snapshotGolden.Snapshot.To, snapshotGolden.Snapshot.Levels, true,
		func(p []byte) error { got = bytes.Clone(p); return nil })
	if !bytes.Equal(got, golden) {
		t.Fatalf("EncodeSnapshot:\n%x\nwant testdata/golden_snapshot.hex:\n%x", got, golden)
	}
	m, err := Decode(golden, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Snapshot
	if !sameHeader(m.Header, snapshotGolden.Header) || s == nil || s.To != snapshotGolden.Snapshot.To || !s.Last || len(s.Levels) != 2 ||
		string(s.Levels[1].Key) != "login:bob" || s.Levels[1].Tokens != -3 || s.Levels[0].Tokens != 2.5 {
		t.Fatalf("Decode = %+v %+v", m, s)
	}
	req := readHex(t, "testdata/golden_request.hex")
	e = &Encoder{Node: 0x1111111111111111, Fingerprint: snapshotGolden.Fingerprint, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = 6
	e.EncodeRequest(snapshotGolden.Sent, func(p []byte) error { got = bytes.Clone(p); return nil })
	if !bytes.Equal(got, req) {
		t.Fatalf("EncodeRequest:\n%x\nwant testdata/golden_request.hex:\n%x", got, req)
	}
	if m, err := Decode(req, []byte("secret")); err != nil || m.Type != MsgSnapshotRequest || m.Seq != 7 {
		t.Fatalf("Decode(request) = %+v, %v", m, err)
	}
}

func TestSnapshotDecodeBad(t *testing.T) {
	h := func(body ...byte) []byte {
		b := make([]byte, headerLen, headerLen+len(body))
		copy(b, "DT\x01\x03")
		binary := b[5:13]
		binary[7] = 1
		return append(b, body...)
	}
	for name, b := range map[string][]byte{
		"not an array":  h(0x80),
		"two elements":  h(0x92, 1, 0xc3),
		"to not a uint": h(0x93, 0xa1, 'x', 0xc3, 0x80),
		"last not bool": h(0x93, 1, 1, 0x80),
		"map claims 9":  h(0x93, 1, 0xc3, 0x89, 0xa1, 'x', 1),
		"level a str":   h(0x93, 1, 0xc3, 0x81, 0xa1, 'x', 0xa1, 'y'),
		"level cut":     h(0x93, 1, 0xc3, 0x81, 0xa1, 'x', 0xcb, 0, 0),
		"trailing":      h(0x93, 1, 0xc3, 0x80, 0),
		"request array": append(h(0x90)[:3], append([]byte{4}, h(0x90)[4:]...)...),
	} {
		if _, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	m, err := Decode(h(0x93, 5, 0xc2, 0x82, 0xa1, 'x', 0xff, 0xa0, 1), nil)
	if err != nil || m.Snapshot.To != 5 || m.Snapshot.Last || len(m.Snapshot.Levels) != 1 || m.Snapshot.Levels[0].Tokens != -1 {
		t.Fatalf("int level, empty key dropped: %+v %v", m.Snapshot, err)
	}
	nan := h(0x93, 5, 0xc2, 0x81, 0xa1, 'x', 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1)
	if m, err := Decode(nan, nil); err != nil || len(m.Snapshot.Levels) != 0 {
		t.Fatalf("NaN level kept: %+v %v", m.Snapshot, err)
	}
}
