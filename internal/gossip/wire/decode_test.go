// Tests of the receiving side of the datagram format: truncated, garbage
// and hostile datagrams, other versions, and what Decode keeps of its input.

package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

func TestDecodeTruncated(t *testing.T) {
	e := &Encoder{Node: 5, MaxPacket: 512}
	hits := randomHits(rand.New(rand.NewPCG(5, 6)), 20)
	plain, _ := encodeAll(t, e, testNow, hits)
	beat, _ := encodeAll(t, e, testNow, nil)
	e.Key = []byte("secret")
	beatMAC, _ := encodeAll(t, e, testNow, nil)
	cases := map[string][]byte{
		"golden":        readGolden(t),
		"hits":          plain[0],
		"heartbeat":     beat[0],
		"heartbeat+mac": beatMAC[0],
	}
	for name, pkt := range cases {
		for _, key := range [][]byte{nil, []byte("secret")} {
			if _, err := Decode(pkt, key); err != nil && (key == nil || pkt[4] != 0) {
				t.Fatalf("%s, whole, key %q: %v", name, key, err)
			}
			for n := range len(pkt) {
				m, err := Decode(pkt[:n], key)
				if err == nil {
					t.Fatalf("%s cut to %d bytes, key %q: decoded %+v, want an error", name, n, key, m)
				}
			}
		}
	}
}

func TestDecodeGarbage(t *testing.T) {
	header := func(typ MsgType) []byte {
		b := []byte{'D', 'T', version, byte(typ), 0}
		return binary.BigEndian.AppendUint64(append(b, make([]byte, 24)...), 1)
	}
	hits := func(body ...byte) []byte { return append(header(MsgHits), body...) }
	bad := map[string][]byte{
		"empty":             {},
		"magic only":        []byte("DT"),
		"bad magic":         append([]byte("XT"), hits(0x80)[2:]...),
		"header cut":        hits()[:30],
		"no body":           hits(),
		"array body":        hits(0x91, 0xa1, 'a', 1),
		"nil body":          hits(0xc0),
		"ext body":          hits(0xd4, 0x01, 0x80),
		"nil key":           hits(0x81, 0xc0, 1),
		"int key":           hits(0x81, 0x05, 1),
		"string count":      hits(0x81, 0xa1, 'a', 0xa1, '1'),
		"nil count":         hits(0x81, 0xa1, 'a', 0xc0),
		"float count":       hits(0x81, 0xa1, 'a', 0xca, 0x3f, 0x80, 0, 0),
		"negative count":    hits(0x81, 0xa1, 'a', 0xff),
		"negative int32":    hits(0x81, 0xa1, 'a', 0xd2, 0xff, 0xff, 0xff, 0xfe),
		"count over 2^32":   hits(0x81, 0xa1, 'a', 0xcf, 0, 0, 0, 1, 0, 0, 0, 0),
		"missing count":     hits(0x81, 0xa1, 'a'),
		"key past end":      hits(0x81, 0xa5, 'a', 1),
		"str8 past end":     hits(0x81, 0xd9, 0xff, 'a', 1),
		"trailing byte":     hits(0x81, 0xa1, 'a', 1, 0),
		"two maps":          hits(0x80, 0x80),
		"map16 cut":         hits(0xde, 0x00),
		"map16 over body":   hits(0xde, 0x00, 0x02, 0xa1, 'a', 1),
		"map32 huge":        hits(0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 1),
		"str32 huge":        hits(0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 1),
		"bin32 huge":        hits(0x81, 0xc6, 0xff, 0xff, 0xff, 0xff, 'a', 1),
		"heartbeat entries": append(header(MsgHeartbeat), 0x81, 0xa1, 'a', 1),
		"heartbeat no body": header(MsgHeartbeat),
		"mac flag, too short": func() []byte {
			b := hits(0x80)
			b[4] = flagMAC
			return append(b, make([]byte, 20)...)
		}(),
	}
	for name, b := range bad {
		if m, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %+v, %v; want ErrMalformed", name, m, err)
		}
	}

	good := map[string]struct {
		b    []byte
		hits []Hit
	}{
		"bin key":                {hits(0x81, 0xc4, 2, 0, 0xff, 7), []Hit{{Key: "\x00\xff", Count: 7}}},
		"str8 short key":         {hits(0x81, 0xd9, 1, 'k', 7), []Hit{{Key: "k", Count: 7}}},
		"signed counts":          {hits(0x82, 0xa1, 'a', 0xd0, 5, 0xa1, 'b', 0xd3, 0, 0, 0, 0, 0, 0, 1, 0), []Hit{{Key: "a", Count: 5}, {Key: "b", Count: 256}}},
		"uint64 max count":       {hits(0x81, 0xa1, 'a', 0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), []Hit{{Key: "a", Count: math.MaxUint32}}},
		"map16 small":            {hits(0xde, 0, 1, 0xa1, 'a', 1), []Hit{{Key: "a", Count: 1}}},
		"no-ops dropped":         {hits(0x83, 0xa0, 3, 0xa1, 'z', 0, 0xa1, 'a', 2), []Hit{{Key: "a", Count: 2}}},
		"duplicates kept":        {hits(0x82, 0xa1, 'a', 1, 0xa1, 'a', 2), []Hit{{Key: "a", Count: 1}, {Key: "a", Count: 2}}},
		"empty hits map":         {hits(0x80), nil},
		"unknown type 13":        {append(header(13), "any body at all"...), nil},
		"unknown type 200":       {header(200), nil},
		"reserved flags ignored": {func() []byte { b := hits(0x81, 0xa1, 'a', 1); b[4] = 0xfe; return b }(), []Hit{{Key: "a", Count: 1}}},
	}
	for name, c := range good {
		m, err := Decode(c.b, nil)
		if err != nil || !slices.Equal(m.Hits, c.hits) || m.Type != MsgType(c.b[3]) || m.Fingerprint != 1 {
			t.Errorf("%s: got %+v, %v; want hits %v", name, m, err, c.hits)
		}
	}

	// Random bodies behind a valid header, and random bytes: never a panic,
	// and anything accepted keeps the invariants.
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 20000 {
		b := make([]byte, rng.IntN(120))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		if i%2 == 0 {
			b = append(hits(byte(0x80|rng.IntN(16))), b...)
		}
		m, err := Decode(b, nil)
		if err == nil {
			checkInvariants(t, m)
		} else if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
			t.Fatalf("random datagram %x: %v", b, err)
		}
	}
}

// checkInvariants fails t unless m's hits are all sendable.
func checkInvariants(t testing.TB, m Message) {
	t.Helper()
	if m.Hits != nil && !slices.Contains([]MsgType{MsgHits, MsgToRelay, MsgAggregate, MsgCrossing, MsgStatedHits}, m.Type) {
		t.Fatalf("type %d with hits %v", m.Type, m.Hits)
	}
	if (m.Top != nil) != (m.Type == MsgTop) {
		t.Fatalf("type %d with heaviest tags %v", m.Type, m.Top)
	}
	for _, h := range m.Hits {
		if h.Key == "" || h.Count == 0 {
			t.Fatalf("decoded a no-op hit %+v", h)
		}
		if (h.Quota.Burst != 0) != (m.Type == MsgStatedHits) || h.Quota.Burst != 0 && h.Quota.Check() != nil {
			t.Fatalf("type %d with hit %+v", m.Type, h)
		}
	}
}

func TestDecodeVersion(t *testing.T) {
	for _, v := range []byte{0, 2, 255} {
		b := readGolden(t)
		b[2] = v
		if _, err := Decode(b, nil); !errors.Is(err, ErrVersion) {
			t.Errorf("version %d: err %v, want ErrVersion", v, err)
		}
		if _, err := Decode(b[:3], nil); !errors.Is(err, ErrVersion) {
			t.Errorf("version %d, 3 bytes: err %v, want ErrVersion", v, err)
		}
	}
}

// TestDecodeHugeLengthClaim checks that lengths claimed by the datagram are
// checked against its size before anything is allocated from them.
func TestDecodeHugeLengthClaim(t *testing.T) {
	header := readGolden(t)[:headerLen]
	header[4] = 0
	for name, body := range map[string][]byte{
		"map32": {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 1},
		"map16": {0xde, 0xff, 0xff, 0xa1, 'a', 1},
		"str32": {0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff, 'a', 1},
		"bin32": {0x81, 0xc6, 0x7f, 0xff, 0xff, 0xff, 'a', 1},
		"str16": {0x81, 0xda, 0xff, 0xff, 'a', 1},
	} {
		b := append(bytes.Clone(header), body...)
		var allocated uint64 = math.MaxUint64
		for range 3 { // the least of three, in case something else allocates
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Decode(b, nil)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s: err %v, want ErrMalformed", name, err)
			}
			allocated = min(allocated, after.TotalAlloc-before.TotalAlloc)
		}
		if allocated > 16<<10 {
			t.Errorf("%s: Decode allocated %d bytes", name, allocated)
		}
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	b := readGolden(t)
	m, err := Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if !slices.Equal(m.Hits, goldenMessage.Hits) {
		t.Fatalf("hits changed with the buffer: %v", m.Hits)
	}
}
