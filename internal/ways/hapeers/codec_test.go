package hapeers

import (
	"bytes"
	"os"
	"testing"
)

// The varint itself is package havarint's (TestVarint there); the
// decoder reads one cut short as "more to come".
func TestVarintShort(t *testing.T) {
	b := appendVarint(nil, 60000)
	if _, n := varint(b[:2]); n != 0 {
		t.Errorf("varint of 2 of 3 bytes read %d", n)
	}
}

func TestDecodeFraming(t *testing.T) {
	msg := appendMessage(nil, msgAck, []byte{1, 0, 0, 0, 9})
	for i := range len(msg) {
		if _, n, err := Decode(msg[:i]); n != 0 || err != nil {
			t.Errorf("Decode of %d of %d bytes: n %d err %v, want more", i, len(msg), n, err)
		}
	}
	m, n, err := Decode(msg)
	if err != nil || n != len(msg) || m.Class != classStickTable || m.Type != msgAck || len(m.Data) != 5 {
		t.Errorf("Decode(ack) = %+v, %d, %v", m, n, err)
	}
	// A length over MaxMessage, or of more than five bytes, is never read.
	for _, b := range [][]byte{
		appendVarint([]byte{classStickTable, msgUpdate}, MaxMessage+1),
		{classStickTable, msgUpdate, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("Decode(% x) took a length it must refuse", b)
		}
	}
	// Control messages are two bytes.
	if m, n, _ := Decode([]byte{classControl, ctrlHeartbeat, 9}); n != 2 || m.Type != ctrlHeartbeat {
		t.Errorf("Decode(heartbeat) = %+v, %d", m, n)
	}
}

func TestDefinitionRoundTrip(t *testing.T) {
	d := Definition{ID: 3, Name: "/web", KeyType: KeyString, KeyLen: 32, Data: 1 << dtGPT0}
	m, _, err := Decode(AppendDefinition(nil, d))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDefinition(m.Data)
	if err != nil || got != d {
		t.Fatalf("DecodeDefinition = %+v, %v; want %+v", got, err, d)
	}
	u := AppendUpdate(nil, &got, 7, []byte("client"), []uint64{1234567})
	m, _, _ = Decode(u)
	up, err := DecodeUpdate(m.Type, m.Data, &got)
	if err != nil || up.ID != 7 || !up.HasID || string(up.Key) != "client" || up.Values[dtGPT0] != 1234567 {
		t.Errorf("DecodeUpdate = %+v, %v", up, err)
	}
}

func TestDefinitionRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"no name", []byte{1, 0, 6, 32, 2}},
		{"truncated", []byte{1, 3, 'w', 'e'}},
		{"unknown data type", append([]byte{1, 1, 'w', 6, 32}, appendVarint(nil, 1<<40)...)},
		{"array without length", append([]byte{1, 1, 'w', 6, 32}, appendVarint(nil, 1<<dtGPT)...)},
		{"array too long", append(append([]byte{1, 1, 'w', 6, 32}, appendVarint(nil, 1<<dtGPT)...), 0, dtGPT, 200)},
		{"huge key", append([]byte{1, 1, 'w', 6}, appendVarint(nil, 1<<20)...)},
	} {
		if _, err := DecodeDefinition(tc.data); err == nil {
			t.Errorf("%s: DecodeDefinition(% x) accepted", tc.name, tc.data)
		}
	}
}

func TestParseHello(t *testing.T) {
	for _, tc := range []struct {
		proto, to, from string
		want            int
	}{
		{"HAProxyS 2.1", "dthrottled", "lb1 42 1", statusOK},
		{"HAProxyS 2.0", "dthrottled", "lb1 42 1", statusOK},
		{"HAProxyS 2.2", "dthrottled", "lb1 42 1", statusVersion},
		{"HAProxyS 3.0", "dthrottled", "lb1 42 1", statusVersion},
		{"HAProxyS x", "dthrottled", "lb1 42 1", statusVersion},
		{"Other 2.1", "dthrottled", "lb1 42 1", statusProtocol},
		{"HAProxyS 2.1", "dthrottled", "lb1", statusProtocol},
	} {
		h, st := ParseHello([]byte(tc.proto), []byte(tc.to), []byte(tc.from))
		if st != tc.want {
			t.Errorf("ParseHello(%q, %q, %q) status %d, want %d", tc.proto, tc.to, tc.from, st, tc.want)
		}
		if st == statusOK && (h.From != "lb1" || h.PID != 42 || h.To != "dthrottled") {
			t.Errorf("ParseHello(%q, %q, %q) = %+v", tc.proto, tc.to, tc.from, h)
		}
	}
}

// TestGolden decodes what Debian's HAProxy 2.6.12 sent a peer listening
// on loopback (testdata/haproxy-2.6.bin, recorded by
// tests/haproxy's TestHAProxyPeersCapture): its hello, a resync request,
// its confirmation of dthrottled's "resync finished", its table's
// definition, and three updates of one client's entry as it was served
// three requests.
func TestGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/haproxy-2.6.bin")
	if err != nil {
		t.Fatal(err)
	}
	msgs, h := decodeStream(t, b)
	if h.Major != 2 || h.Minor != 1 || h.To != "dthrottled" || h.From != "haproxy" {
		t.Errorf("hello %+v, want version 2.1 from haproxy to dthrottled", h)
	}
	if len(msgs) != 6 {
		t.Fatalf("%d messages, want 6: %+v", len(msgs), msgs)
	}
	if msgs[0].Class != classControl || msgs[0].Type != ctrlResyncRequest || msgs[1].Type != ctrlResyncConfirm {
		t.Errorf("first messages %+v %+v, want a resync request and a confirmation", msgs[0], msgs[1])
	}
	d, err := DecodeDefinition(msgs[2].Data)
	want := Definition{ID: 1, Name: "/web", KeyType: KeyIPv4, KeyLen: 4, Data: 1<<dtGPT0 | 1<<dtGPC0, Expire: 60000}
	if err != nil || d != want {
		t.Fatalf("definition %+v, %v; want %+v", d, err, want)
	}
	for i, m := range msgs[3:] {
		u, err := DecodeUpdate(m.Type, m.Data, &d)
		if err != nil || !bytes.Equal(u.Key, []byte{127, 0, 0, 1}) || u.Values[dtGPC0] != uint64(i+1) || u.Values[dtGPT0] != 0 {
			t.Errorf("update %d: %+v, %v; want 127.0.0.1 with gpc0 %d", i, u, err, i+1)
		}
	}
}

// decodeStream reads a hello and the messages after it.
func decodeStream(t *testing.T, b []byte) ([]Message, Hello) {
	t.Helper()
	var lines [3][]byte
	for i := range lines {
		var ok bool
		if lines[i], b, ok = readHelloLine(b); !ok {
			t.Fatalf("hello line %d missing", i+1)
		}
	}
	h, st := ParseHello(lines[0], lines[1], lines[2])
	if st != statusOK {
		t.Fatalf("hello: status %d", st)
	}
	var msgs []Message
	for len(b) > 0 {
		m, n, err := Decode(b)
		if err != nil || n == 0 {
			t.Fatalf("message at % x: n %d, %v", b, n, err)
		}
		msgs = append(msgs, m)
		b = b[n:]
	}
	return msgs, h
}
