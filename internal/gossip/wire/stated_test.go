// Tests of hits and levels under stated limits: the golden vector of type
// 12, a report split into plain and stated datagrams, snapshot levels,
// and malformed entries.

package wire

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

var (
	statedLeaky    = bucket.Quota{Algorithm: bucket.Leaky, Burst: 3, Rate: 0.05}
	statedWindow   = bucket.Quota{Algorithm: bucket.Window, Burst: 1000, Period: time.Hour}
	statedCalendar = bucket.Quota{Algorithm: bucket.Window, Burst: 20, Calendar: bucket.Day}
)

// TestStatedGolden pins a report's stated datagram (type 12) to
// testdata/golden_stated.hex, both ways: the bytes docs/wire-format.md
// shows. The report's plain hit goes in a type 1 datagram before it.
func TestStatedGolden(t *testing.T) {
	want := readHex(t, "testdata/golden_stated.hex")
	e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400}
	e.seq = 10
	hits := []Hit{
		{Key: "api_k1", Count: 2, Quota: statedLeaky},
		{Key: "10.0.0.9", Count: 1},
		{Key: "api_k2", Count: 300, Quota: statedWindow},
		{Key: "day_k3", Count: 1, Quota: statedCalendar},
	}
	var pkts [][]byte
	if _, err := e.Encode(time.UnixMilli(1767225600000), hits, func(p []byte) error {
		pkts = append(pkts, bytes.Clone(p))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(pkts) != 2 || pkts[0][3] != byte(MsgHits) {
		t.Fatalf("got %d datagrams, want a plain one then a stated one", len(pkts))
	}
	if !bytes.Equal(pkts[1], want) {
		t.Fatalf("Encode:\n%x\nwant testdata/golden_stated.hex:\n%x", pkts[1], want)
	}
	m, err := Decode(want, nil)
	if err != nil || m.Type != MsgStatedHits || m.Seq != 12 {
		t.Fatalf("Decode: %+v, %v", m, err)
	}
	wantHits := []Hit{hits[0], hits[2], hits[3]}
	if !slices.Equal(m.Hits, wantHits) {
		t.Fatalf("Decode hits: %+v, want %+v", m.Hits, wantHits)
	}
	plain, err := Decode(pkts[0], nil)
	if err != nil || !slices.Equal(plain.Hits, []Hit{{Key: "10.0.0.9", Count: 1}}) {
		t.Fatalf("the plain datagram: %+v, %v", plain, err)
	}
}

func TestStatedSnapshot(t *testing.T) {
	levels := []Level{
		{Key: []byte("a"), Tokens: 1.5},
		{Key: []byte("b"), Tokens: -2, Quota: statedLeaky},
		{Key: []byte("c"), Tokens: 7, Quota: statedCalendar},
		{Key: []byte("d"), Tokens: 0.25},
	}
	e := &Encoder{Node: 9, MaxPacket: 1400}
	var got []Level
	var datagrams int
	for rest := levels; ; {
		packed, _, err := e.EncodeSnapshot(time.UnixMilli(0), 5, rest, true, func(p []byte) error {
			datagrams++
			m, err := Decode(p, nil)
			if err != nil {
				return err
			}
			got = append(got, m.Snapshot.Levels...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if rest = rest[packed:]; len(rest) == 0 {
			break
		}
	}
	// One sort of level per datagram: plain, stated, plain.
	if datagrams != 3 {
		t.Errorf("%d datagrams, want 3", datagrams)
	}
	if len(got) != len(levels) {
		t.Fatalf("got %d levels, want %d", len(got), len(levels))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, levels[i].Key) || got[i].Tokens != levels[i].Tokens || got[i].Quota != levels[i].Quota {
			t.Errorf("level %d: got %+v, want %+v", i, got[i], levels[i])
		}
	}
}

func TestStatedMalformed(t *testing.T) {
	header := func() []byte {
		b := make([]byte, headerLen)
		b[0], b[1], b[2], b[3] = 'D', 'T', version, byte(MsgStatedHits)
		return b
	}
	for name, body := range map[string][]byte{
		"not an array":      {0x81, 0xa1, 'k', 3},
		"array of 4":        {0x81, 0xa1, 'k', 0x94, 1, 0, 3, 0},
		"leaky rate as int": {0x81, 0xa1, 'k', 0x95, 1, 0, 3, 1, 0},
		"burst 0":           {0x81, 0xa1, 'k', 0x95, 1, 1, 0, 0xcf, 0, 0, 0, 0, 0x3b, 0x9a, 0xca, 0, 0},
		"window of 1ns":     {0x81, 0xa1, 'k', 0x95, 1, 1, 1, 1, 0},
		"calendar 9":        {0x81, 0xa1, 'k', 0x95, 1, 1, 1, 0, 9},
		"truncated":         {0x81, 0xa1, 'k', 0x95, 1, 0, 3, 0xcb, 0x3f},
	} {
		if _, err := Decode(append(header(), body...), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}
