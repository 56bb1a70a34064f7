// Fuzzing of the datagram decoder.

package wire

import (
	"slices"
	"testing"
	"time"
)

// FuzzDecode feeds Decode arbitrary datagrams: it must never panic, and
// whatever it accepts must survive a re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	f.Add(readGolden(f))
	beat, _ := encodeAll(f, &Encoder{Node: 1, MaxPacket: 512}, testNow, nil)
	f.Add(beat[0])
	plain, _ := encodeAll(f, &Encoder{Node: 2, MaxPacket: 512}, testNow, []Hit{{Key: "a", Count: 1}, {Key: "\x00\xff", Count: 70000}})
	f.Add(plain[0])
	f.Add([]byte("DT\x01\x01\x00garbage that is not a header"))
	f.Add([]byte{})
	f.Add(readHex(f, "testdata/golden_snapshot.hex"))
	f.Add(readHex(f, "testdata/golden_request.hex"))
	f.Add(readHex(f, "testdata/golden_peers.hex"))
	f.Add(readHex(f, "testdata/golden_relay.hex"))
	key := []byte("secret")
	f.Fuzz(func(t *testing.T, b []byte) {
		Decode(b, key) // must not panic
		m, err := Decode(b, nil)
		if err != nil {
			return
		}
		checkInvariants(t, m)
		if len(b) > MaxPacket {
			return // a hit from it might not fit a datagram of ours
		}
		e := &Encoder{Node: 1, Fingerprint: m.Fingerprint, MaxPacket: MaxPacket, Key: key}
		pkts, skipped := encodeAll(t, e, time.UnixMilli(0), m.Hits)
		if skipped != 0 {
			t.Fatalf("re-encoding skipped %d hits", skipped)
		}
		var got []Hit
		for _, pkt := range pkts {
			m2, err := Decode(pkt, key)
			if err != nil {
				t.Fatalf("decoding the re-encoding: %v", err)
			}
			got = append(got, m2.Hits...)
		}
		if !slices.Equal(got, m.Hits) {
			t.Fatalf("re-encoded hits %v, want %v", got, m.Hits)
		}
	})
}
