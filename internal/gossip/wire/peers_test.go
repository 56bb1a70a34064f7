// Tests of the peers message: round trips, malformed bodies and the
// golden vector.

package wire

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestPeersRoundTrip(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("a key of sixteen bytes")} {
		var addrs []string
		for i := range 200 { // several datagrams of 512 bytes
			addrs = append(addrs, fmt.Sprintf("10.0.%d.%d:7777", i/250, i%250+1))
		}
		e := &Encoder{Node: 7, MaxPacket: MinPacket, Key: key}
		var got []string
		packets := 0
		err := e.EncodePeers(time.UnixMilli(1e12), addrs, func(pkt []byte) error {
			packets++
			if len(pkt) > MinPacket {
				t.Fatalf("datagram of %d bytes, over %d", len(pkt), MinPacket)
			}
			m, err := Decode(pkt, key)
			if err != nil || m.Type != MsgPeers || m.Node != 7 {
				t.Fatalf("decoding %x: %+v, %v", pkt, m.Header, err)
			}
			got = append(got, m.Peers...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, addrs) || packets < 2 {
			t.Fatalf("key %v: %d datagrams carried %d addresses, want all %d in order", key != nil, packets, len(got), len(addrs))
		}
	}
	// An empty list is one datagram with an empty array.
	e := &Encoder{Node: 7, MaxPacket: MinPacket}
	n := 0
	e.EncodePeers(time.Now(), nil, func(pkt []byte) error {
		n++
		if m, err := Decode(pkt, nil); err != nil || len(m.Peers) != 0 {
			t.Fatalf("empty list: %+v, %v", m, err)
		}
		return nil
	})
	if n != 1 {
		t.Fatalf("an empty list took %d datagrams, want 1", n)
	}
}

func TestPeersMalformed(t *testing.T) {
	header := func() []byte {
		b := make([]byte, headerLen)
		b[0], b[1], b[2], b[3] = 'D', 'T', version, byte(MsgPeers)
		b[5+7], b[13+7] = 1, 1
		return b
	}
	for name, body := range map[string][]byte{
		"not an array":    {0x80},
		"not a string":    {0x91, 0x05},
		"not an address":  append([]byte{0x91, 0xa5}, "hello"...),
		"port 0":          append([]byte{0x91, 0xa9}, "1.2.3.4:0"...),
		"truncated":       append([]byte{0x92, 0xa9}, "1.2.3.4:1"...),
		"trailing":        append(append([]byte{0x91, 0xa9}, "1.2.3.4:1"...), 0xc0),
		"array too large": {0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := Decode(append(header(), body...), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestPeersGolden pins MsgPeers to testdata/golden_peers.hex, both ways:
// the bytes README's wire format section shows.
func TestPeersGolden(t *testing.T) {
	want := readHex(t, "testdata/golden_peers.hex")
	e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = 42
	var got []byte
	e.EncodePeers(time.UnixMilli(1767225600000), []string{"10.0.0.2:7777", "10.0.0.3:7777"}, func(p []byte) error {
		got = slices.Clone(p)
		return nil
	})
	if !slices.Equal(got, want) {
		t.Fatalf("EncodePeers:\n%x\nwant testdata/golden_peers.hex:\n%x", got, want)
	}
	m, err := Decode(want, []byte("secret"))
	if err != nil || m.Type != MsgPeers || m.Seq != 43 || m.Node != 0x0102030405060708 ||
		!slices.Equal(m.Peers, []string{"10.0.0.2:7777", "10.0.0.3:7777"}) {
		t.Fatalf("Decode(golden) = %+v, %v", m, err)
	}
	if _, err := Decode(want, []byte("another secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("Decode under another key: %v, want ErrAuth", err)
	}
}
