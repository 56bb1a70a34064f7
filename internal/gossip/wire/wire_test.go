// Tests of the datagram format: round trips, packing, MAC and the golden
// vector. Hostile and truncated datagrams: decode_test.go.

package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 678912345, time.UTC)

// encodeAll runs e.Encode and returns copies of the datagrams it emitted.
func encodeAll(t testing.TB, e *Encoder, now time.Time, hits []Hit) (pkts [][]byte, skipped int) {
	t.Helper()
	skipped, err := e.Encode(now, hits, func(pkt []byte) error {
		pkts = append(pkts, bytes.Clone(pkt))
		return nil
	})
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return pkts, skipped
}

// sendable is hits without the entries Encode drops.
func sendable(hits []Hit) []Hit {
	var out []Hit
	for _, h := range hits {
		if h.Key != "" && h.Count > 0 {
			out = append(out, h)
		}
	}
	return out
}

// randomHits makes n hits with distinct keys of assorted lengths and bytes
// and counts at every msgpack size boundary.
func randomHits(rng *rand.Rand, n int) []Hit {
	counts := []uint32{1, 2, 127, 128, 255, 256, 65535, 65536, math.MaxUint32}
	lengths := []int{1, 2, 13, 31, 32, 200, 255, 256, 300}
	seen := make(map[string]bool)
	var hits []Hit
	for len(hits) < n {
		b := make([]byte, lengths[rng.IntN(len(lengths))])
		if rng.IntN(2) == 0 {
			for i := range b {
				b[i] = byte(rng.UintN(256)) // binary, often not UTF-8
			}
		} else {
			for i := range b {
				b[i] = "abcdefghijklmnopqrstuvwxyz0123456789.:"[rng.IntN(38)]
			}
		}
		if seen[string(b)] {
			continue
		}
		seen[string(b)] = true
		c := counts[rng.IntN(len(counts))]
		if rng.IntN(3) == 0 {
			c = rng.Uint32()
		}
		if c == 0 {
			c = 1
		}
		hits = append(hits, Hit{Key: string(b), Count: c})
	}
	return hits
}

func TestWireRoundTrip(t *testing.T) {
	for _, maxPacket := range []int{512, 1400, 9000} {
		for _, key := range [][]byte{nil, []byte("k3y")} {
			t.Run(fmt.Sprintf("max=%d/mac=%v", maxPacket, key != nil), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(maxPacket), uint64(len(key))))
				hits := randomHits(rng, 600)
				// Entries Encode must drop without counting them.
				hits = slices.Insert(hits, 10, Hit{Key: "", Count: 5}, Hit{Key: "zero", Count: 0})
				e := &Encoder{Node: 0xfeedface, Fingerprint: 77, MaxPacket: maxPacket, Key: key}
				pkts, skipped := encodeAll(t, e, testNow, hits)
				if skipped != 0 {
					t.Fatalf("skipped %d, want 0", skipped)
				}
				if len(pkts) < 3 {
					t.Fatalf("%d datagrams, want several", len(pkts))
				}
				var got []Hit
				counts := make([]int, len(pkts))
				for i, pkt := range pkts {
					if len(pkt) > maxPacket {
						t.Fatalf("datagram %d: %d bytes > MaxPacket %d", i, len(pkt), maxPacket)
					}
					m, err := Decode(pkt, key)
					if err != nil {
						t.Fatalf("datagram %d: %v", i, err)
					}
					want := Header{Type: MsgHits, Node: 0xfeedface, Seq: uint64(i + 1),
						Sent: time.UnixMilli(testNow.UnixMilli()), Fingerprint: 77}
					if !sameHeader(m.Header, want) {
						t.Fatalf("datagram %d: header %+v, want %+v", i, m.Header, want)
					}
					if !m.Sent.Equal(testNow.Truncate(time.Millisecond)) {
						t.Fatalf("datagram %d: sent %v, want %v", i, m.Sent, testNow)
					}
					counts[i] = len(m.Hits)
					got = append(got, m.Hits...)
				}
				if want := sendable(hits); !slices.Equal(got, want) {
					t.Fatalf("decoded %d hits, want the %d sent, in order", len(got), len(want))
				}
				if e.seq != uint64(len(pkts)) {
					t.Fatalf("seq = %d, want %d", e.seq, len(pkts))
				}
				// Each datagram but the last is full: the next hit would not fit.
				next := 0
				for i, pkt := range pkts[:len(pkts)-1] {
					next += counts[i]
					h := got[next]
					grow := mapHeaderLen(counts[i]+1) - mapHeaderLen(counts[i])
					if len(pkt)+entryLen(h)+grow <= maxPacket {
						t.Fatalf("datagram %d: %d bytes, and the next hit (%d bytes) would fit", i, len(pkt), entryLen(h))
					}
				}
			})
		}
	}
}

// sameHeader compares headers, times with Equal.
func sameHeader(a, b Header) bool {
	return a.Type == b.Type && a.Node == b.Node && a.Seq == b.Seq &&
		a.Sent.Equal(b.Sent) && a.Fingerprint == b.Fingerprint
}

func TestEncodeHeartbeat(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("secret")} {
		e := &Encoder{Node: 9, Fingerprint: 3, MaxPacket: 1400, Key: key}
		for i, hits := range [][]Hit{nil, {}, {{Key: "", Count: 4}, {Key: "idle", Count: 0}}} {
			pkts, skipped := encodeAll(t, e, testNow, hits)
			if len(pkts) != 1 || skipped != 0 {
				t.Fatalf("mac=%v case %d: %d datagrams, %d skipped; want 1, 0", key != nil, i, len(pkts), skipped)
			}
			wantLen := headerLen + 1
			if key != nil {
				wantLen += macLen
			}
			if len(pkts[0]) != wantLen || pkts[0][headerLen] != 0x80 {
				t.Fatalf("mac=%v case %d: % x, want %d bytes with an empty fixmap body", key != nil, i, pkts[0], wantLen)
			}
			m, err := Decode(pkts[0], key)
			if err != nil {
				t.Fatal(err)
			}
			want := Header{Type: MsgHeartbeat, Node: 9, Seq: uint64(i + 1), Sent: testNow.Truncate(time.Millisecond), Fingerprint: 3}
			if !sameHeader(m.Header, want) || m.Hits != nil {
				t.Fatalf("mac=%v case %d: got %+v, want %+v and no hits", key != nil, i, m, want)
			}
		}
	}
}

func TestEncodeSkipsOversizedKey(t *testing.T) {
	// With a MAC, 1400 bytes leave 1400-37-32 for the body: a fixmap header
	// (1), a str16 header (3), the key and a 1-byte count.
	const longest = 1400 - headerLen - macLen - 1 - 3 - 1
	fits := strings.Repeat("f", longest)
	tooLong := strings.Repeat("x", longest+1)
	hits := []Hit{{Key: "a", Count: 1}, {Key: tooLong, Count: 1}, {Key: fits, Count: 1}, {Key: strings.Repeat("y", 70000), Count: 2}, {Key: "b", Count: 300}}
	e := &Encoder{Node: 1, MaxPacket: 1400, Key: []byte("k")}
	pkts, skipped := encodeAll(t, e, testNow, hits)
	if skipped != 2 {
		t.Fatalf("skipped %d, want 2", skipped)
	}
	var got []Hit
	for _, pkt := range pkts {
		m, err := Decode(pkt, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Hits...)
	}
	if want := []Hit{{Key: "a", Count: 1}, {Key: fits, Count: 1}, {Key: "b", Count: 300}}; !slices.Equal(got, want) {
		t.Fatalf("decoded %d hits, want a, the longest key, b", len(got))
	}
	if len(pkts) != 3 || len(pkts[1]) != 1400 {
		t.Fatalf("datagram sizes: want 3, the middle exactly 1400 bytes; got %d datagrams", len(pkts))
	}

	// Nothing sendable at all: a heartbeat still says the node is alive.
	pkts, skipped = encodeAll(t, e, testNow, []Hit{{Key: tooLong, Count: 1}})
	if skipped != 1 || len(pkts) != 1 || pkts[0][3] != byte(MsgHeartbeat) {
		t.Fatalf("only an oversized hit: %d datagrams, %d skipped; want one heartbeat, 1 skipped", len(pkts), skipped)
	}
}

// TestEncodeBodyMatchesLibrary checks the hand-written msgpack against the
// library's encoding of the same map.
func TestEncodeBodyMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 15, 16, 17, 200} {
		hits := randomHits(rng, n)
		e := &Encoder{Node: 1, MaxPacket: MaxPacket}
		pkts, _ := encodeAll(t, e, testNow, hits)
		if len(pkts) != 1 {
			t.Fatalf("%d hits: %d datagrams, want 1", n, len(pkts))
		}
		var want bytes.Buffer
		enc := msgpack.NewEncoder(&want)
		if err := enc.EncodeMapLen(len(hits)); err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if err := enc.EncodeString(h.Key); err != nil {
				t.Fatal(err)
			}
			if err := enc.EncodeUint(uint64(h.Count)); err != nil {
				t.Fatal(err)
			}
		}
		if got := pkts[0][headerLen:]; !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d hits: body differs from the library's encoding", n)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	emit := func([]byte) error { return nil }
	for _, e := range []*Encoder{
		{Node: 0, MaxPacket: 1400},
		{Node: 1, MaxPacket: 511},
		{Node: 1, MaxPacket: 65508},
	} {
		if _, err := e.Encode(testNow, nil, emit); err == nil {
			t.Errorf("Encoder{Node: %d, MaxPacket: %d}: no error", e.Node, e.MaxPacket)
		}
	}

	// An emit error stops Encode; the sequence number is spent.
	boom := errors.New("boom")
	e := &Encoder{Node: 1, MaxPacket: 512}
	calls := 0
	_, err := e.Encode(testNow, randomHits(rand.New(rand.NewPCG(3, 4)), 200), func([]byte) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || calls != 1 || e.seq != 1 {
		t.Fatalf("emit error: err %v after %d calls, Seq %d; want boom after 1 call, Seq 1", err, calls, e.seq)
	}

	// A changed Key takes effect.
	e = &Encoder{Node: 1, MaxPacket: 512, Key: []byte("one")}
	encodeAll(t, e, testNow, nil)
	e.Key = []byte("two")
	pkts, _ := encodeAll(t, e, testNow, nil)
	if _, err := Decode(pkts[0], []byte("two")); err != nil {
		t.Fatalf("after changing Key: %v", err)
	}
}

// goldenMessage is the message in testdata/golden.hex, sent with key "secret".
var goldenMessage = Message{
	Header: Header{
		Type:        MsgHits,
		Node:        0x0102030405060708,
		Seq:         42,
		Sent:        time.UnixMilli(1767225600000),
		Fingerprint: 0x1122334455667788,
	},
	Hits: []Hit{{Key: "203.0.113.7", Count: 3}, {Key: "login:bob", Count: 200}},
}

func readGolden(t testing.TB) []byte {
	t.Helper()
	text, err := os.ReadFile("testdata/golden.hex")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	if err != nil {
		t.Fatalf("testdata/golden.hex: %v", err)
	}
	return b
}

func TestGolden(t *testing.T) {
	golden := readGolden(t)
	e := &Encoder{Node: goldenMessage.Node, Fingerprint: goldenMessage.Fingerprint, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = goldenMessage.Seq - 1
	pkts, _ := encodeAll(t, e, goldenMessage.Sent, goldenMessage.Hits)
	if len(pkts) != 1 || !bytes.Equal(pkts[0], golden) {
		t.Fatalf("Encode:\n%x\nwant testdata/golden.hex:\n%x", pkts, golden)
	}
	for _, key := range [][]byte{[]byte("secret"), nil} {
		m, err := Decode(golden, key)
		if err != nil {
			t.Fatalf("Decode(golden, %q): %v", key, err)
		}
		if !sameHeader(m.Header, goldenMessage.Header) || !slices.Equal(m.Hits, goldenMessage.Hits) {
			t.Fatalf("Decode(golden, %q) = %+v, want %+v", key, m, goldenMessage)
		}
	}
}

func TestMAC(t *testing.T) {
	key := []byte("secret")
	golden := readGolden(t)
	for i := range golden {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(golden)
			b[i] ^= x
			_, err := Decode(b, key)
			if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^ %#x: err %v, want ErrAuth or ErrMalformed (ErrVersion on byte 2)", i, x, err)
			}
			if i >= 3 && !errors.Is(err, ErrAuth) {
				t.Fatalf("byte %d ^ %#x: err %v, want ErrAuth", i, x, err)
			}
		}
	}
	if _, err := Decode(golden, []byte("secreT")); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong key: err %v, want ErrAuth", err)
	}
	// The same message without a MAC.
	e := &Encoder{Node: goldenMessage.Node, Fingerprint: goldenMessage.Fingerprint, MaxPacket: 1400}
	pkts, _ := encodeAll(t, e, goldenMessage.Sent, goldenMessage.Hits)
	if pkts[0][4] != 0 || len(pkts[0]) != len(golden)-macLen {
		t.Fatalf("without Key: flags %#x, %d bytes; want 0 and %d", pkts[0][4], len(pkts[0]), len(golden)-macLen)
	}
	if _, err := Decode(pkts[0], key); !errors.Is(err, ErrAuth) {
		t.Fatalf("no MAC under a key: err %v, want ErrAuth", err)
	}
	// The golden's MAC bytes appended without the flag are trailing junk.
	b := bytes.Clone(golden)
	b[4] = 0
	if _, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("MAC without its flag: err %v, want ErrMalformed", err)
	}
}

// TestWireBytesPerTag checks the packing against its floor: each 13-byte tag
// with one hit costs a 1-byte str header, 13 bytes and a 1-byte count, and
// each datagram a 37-byte header, a 3-byte map16 header and a 32-byte MAC.
func TestWireBytesPerTag(t *testing.T) {
	const (
		tags        = 10000
		keyLen      = 13
		perTag      = 1 + keyLen + 1
		perDatagram = headerLen + 3 + macLen
	)
	hits := make([]Hit, tags)
	for i := range hits {
		hits[i] = Hit{Key: fmt.Sprintf("10.%03d.%03d.%02d", i/10000, i/100%100, i%100), Count: 1}
		if len(hits[i].Key) != keyLen {
			t.Fatalf("key %q is not %d bytes", hits[i].Key, keyLen)
		}
	}
	e := &Encoder{Node: 1, MaxPacket: 1400, Key: []byte("secret")}
	pkts, _ := encodeAll(t, e, testNow, hits)
	total := 0
	for _, pkt := range pkts {
		total += len(pkt)
	}
	perPacket := (1400 - perDatagram) / perTag
	if want := (tags + perPacket - 1) / perPacket; len(pkts) != want {
		t.Errorf("%d datagrams, want %d (%d tags each)", len(pkts), want, perPacket)
	}
	if limit := tags*perTag + len(pkts)*perDatagram; total > limit {
		t.Errorf("%d bytes on the wire, want <= %d", total, limit)
	}
	t.Logf("%d tags: %d datagrams, %d bytes, %.2f bytes/tag", tags, len(pkts), total, float64(total)/tags)
}
