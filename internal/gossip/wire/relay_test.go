// Tests of the relay messages: the golden vector of each type and the
// relay's heartbeat.

package wire

import (
	"slices"
	"testing"
	"time"
)

// TestRelayGolden pins a hits-for-a-relay datagram (type 6, flag bit 1
// set) to testdata/golden_relay.hex, both ways: the bytes README's wire
// format section shows. Types 7 and 8 differ from it in the type byte only.
func TestRelayGolden(t *testing.T) {
	want := readHex(t, "testdata/golden_relay.hex")
	encode := func(typ MsgType) []byte {
		e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400, Relayed: true}
		e.seq = 6
		var got []byte
		if _, err := e.EncodeRelay(time.UnixMilli(1767225600000), typ, []Hit{{Key: "10.0.0.9", Count: 3}, {Key: "key:abc", Count: 200}}, func(p []byte) error {
			got = slices.Clone(p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := encode(MsgToRelay); !slices.Equal(got, want) {
		t.Fatalf("EncodeRelay:\n%x\nwant testdata/golden_relay.hex:\n%x", got, want)
	}
	for _, typ := range []MsgType{MsgToRelay, MsgAggregate, MsgCrossing} {
		b := encode(typ)
		if b[3] != byte(typ) || !slices.Equal(b[4:], want[4:]) {
			t.Errorf("type %d: %x, want the golden datagram with type byte %d", typ, b, typ)
		}
		m, err := Decode(b, nil)
		if err != nil || m.Type != typ || m.Seq != 7 || !m.Relayed || m.Node != 0x0102030405060708 ||
			!slices.Equal(m.Hits, []Hit{{Key: "10.0.0.9", Count: 3}, {Key: "key:abc", Count: 200}}) {
			t.Errorf("Decode(type %d) = %+v, %v", typ, m, err)
		}
	}
	// An empty aggregate or crossing is the relay's heartbeat; nothing
	// is sent to a relay with no hits for it.
	for typ, want := range map[MsgType]int{MsgToRelay: 1, MsgAggregate: 1, MsgCrossing: 1} {
		e := &Encoder{Node: 1, MaxPacket: 1400}
		sent := 0
		e.EncodeRelay(time.UnixMilli(0), typ, nil, func(p []byte) error {
			if len(p) != headerLen+1 || p[headerLen] != 0x80 {
				t.Errorf("type %d heartbeat: %x", typ, p)
			}
			sent++
			return nil
		})
		if sent != want {
			t.Errorf("type %d with no hits: %d datagrams, want %d", typ, sent, want)
		}
	}
}
