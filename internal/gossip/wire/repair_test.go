package wire

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// repairGolden is the request TestRepairGolden pins.
var repairGolden = Repair{To: 0x1122334455667788, Stream: StreamToRelay, Seqs: []uint64{7, 300, 1 << 40}}

// TestRepairGolden pins MsgRepair to testdata/golden_repair.hex, both
// ways: the bytes docs/wire-format.md shows. Run with -update to write it.
func TestRepairGolden(t *testing.T) {
	e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = 9
	var got []byte
	if err := e.EncodeRepair(time.UnixMilli(1767225600000), repairGolden, func(p []byte) error {
		got = slices.Clone(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := readHex(t, "testdata/golden_repair.hex")
	if !slices.Equal(got, want) {
		t.Fatalf("EncodeRepair:\n%x\nwant testdata/golden_repair.hex:\n%x", got, want)
	}
	m, err := Decode(want, []byte("secret"))
	if err != nil || m.Type != MsgRepair || m.Seq != 10 || m.Repair == nil || m.Repair.To != repairGolden.To ||
		m.Repair.Stream != repairGolden.Stream || !slices.Equal(m.Repair.Seqs, repairGolden.Seqs) {
		t.Fatalf("Decode(golden) = %+v, %v", m, err)
	}
	if _, err := Decode(want, []byte("another secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("Decode under another key: %v, want ErrAuth", err)
	}
	if typ, node, seq, ok := PeekSeq(want); !ok || typ != MsgRepair || node != 0x0102030405060708 || seq != 10 {
		t.Fatalf("PeekSeq = %d %x %d %v", typ, node, seq, ok)
	}
}

// A request naming more numbers than one datagram holds goes as several,
// each at most the smallest datagram.
func TestRepairSplit(t *testing.T) {
	e := &Encoder{Node: 1, MaxPacket: MinPacket, Key: []byte("k")}
	seqs := make([]uint64, 2*MaxRepairSeqs+1)
	for i := range seqs {
		seqs[i] = 1<<63 + uint64(i)
	}
	var got []uint64
	n := 0
	err := e.EncodeRepair(time.Now(), Repair{To: 2, Seqs: seqs}, func(p []byte) error {
		n++
		if len(p) > MinPacket {
			t.Errorf("datagram of %d bytes", len(p))
		}
		m, err := Decode(p, []byte("k"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Repair.Seqs...)
		return nil
	})
	if err != nil || n != 3 || !slices.Equal(got, seqs) {
		t.Fatalf("%d datagrams, %d numbers, %v", n, len(got), err)
	}
}

// A malformed body is refused, never a panic.
func TestRepairMalformed(t *testing.T) {
	e := &Encoder{Node: 1, MaxPacket: 1400}
	var good []byte
	e.EncodeRepair(time.Now(), Repair{To: 2, Seqs: []uint64{5}}, func(p []byte) error { good = slices.Clone(p); return nil })
	body := func(b ...byte) []byte { return append(slices.Clone(good[:headerLen]), b...) }
	for name, b := range map[string][]byte{
		"not an array":   body(0x80),
		"two elements":   body(0x92, 2, 0),
		"no numbers":     body(0x93, 2, 0, 0x90),
		"stream 3":       body(0x93, 2, 3, 0x91, 5),
		"negative seq":   body(0x93, 2, 0, 0x91, 0xff),
		"a string seq":   body(0x93, 2, 0, 0x91, 0xa1, 'a'),
		"truncated":      body(0x93, 2, 0, 0x92, 5),
		"trailing bytes": body(0x93, 2, 0, 0x91, 5, 0),
		"45 numbers":     append(body(0x93, 2, 0, 0xdc, 0, 45), make([]byte, 45)...),
	} {
		if m, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v; want ErrMalformed", name, m, err)
		}
	}
	if m, err := Decode(good, nil); err != nil || m.Repair.To != 2 || !slices.Equal(m.Repair.Seqs, []uint64{5}) {
		t.Errorf("good: %+v, %v", m, err)
	}
}
