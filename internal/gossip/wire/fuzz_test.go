// Fuzzing of the datagram decoder.

package wire

import (
	"reflect"
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
	f.Add(readHex(f, "testdata/golden_goodbye.hex"))
	f.Add(readHex(f, "testdata/golden_snapshot.hex"))
	f.Add(readHex(f, "testdata/golden_request.hex"))
	f.Add(readHex(f, "testdata/golden_peers.hex"))
	f.Add(readHex(f, "testdata/golden_relay.hex"))
	f.Add(readHex(f, "testdata/golden_stated.hex"))
	f.Add(readHex(f, "testdata/golden_top.hex"))
	f.Add(readHex(f, "testdata/golden_repair.hex"))
	key := []byte("secret")
	f.Fuzz(func(t *testing.T, b []byte) {
		Decode(b, key) // must not panic
		m, err := Decode(b, nil)
		if err != nil {
			return
		}
		checkInvariants(t, m)
		if m.Type == MsgTop {
			checkTopRoundTrip(t, b, *m.Top)
			return
		}
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

// checkTopRoundTrip re-encodes a report decoded from b: when the
// re-encoding has room for all of it (the encoder reserves room for a
// list's floor to rise, and for the largest left-out counts), it must
// decode to the same report.
func checkTopRoundTrip(t *testing.T, b []byte, r TopReport) {
	for _, l := range r.Lists {
		if l.Policy == "" || l.By > 1 {
			t.Fatalf("decoded a list that is never sent: %+v", l)
		}
		for _, it := range l.Items {
			if it.Key == "" {
				t.Fatalf("decoded a tag with an empty key in %+v", l)
			}
		}
	}
	if len(b)+topFixed+9*len(r.Lists)+macLen > MaxPacket {
		return
	}
	e := &Encoder{Node: 1, MaxPacket: MaxPacket, Key: []byte("secret")}
	var got *TopReport
	dropped, err := e.EncodeTop(time.UnixMilli(0), r, func(pkt []byte) error {
		m, err := Decode(pkt, e.Key)
		if err != nil {
			t.Fatalf("decoding the re-encoding: %v", err)
		}
		got = m.Top
		return nil
	})
	if err != nil || dropped != 0 || !reflect.DeepEqual(*got, r) {
		t.Fatalf("re-encoded report (%d dropped, %v):\n%+v\nwant\n%+v", dropped, err, got, r)
	}
}
