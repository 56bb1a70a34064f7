// Tests of the heaviest tags message: round trips, fitting a datagram,
// malformed bodies and the golden vector.

package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/top"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// topGolden is the report in testdata/golden_top.hex.
var topGolden = TopReport{Lists: []TopList{
	{Policy: "login", By: top.Refused, Summary: topk.Summary{Total: 120, Floor: 2, Items: []topk.Item{
		{Key: "203.0.113.7", Count: 90}, {Key: "login:bob", Count: 25, Err: 2}}}},
	{Policy: "default", By: top.Served, Summary: topk.Summary{Total: 5000, Floor: 40, Items: []topk.Item{
		{Key: "198.51.100.4", Count: 700, Err: 40}}}},
}}

// encodeTop runs e.EncodeTop and returns the datagram and the decoded
// report.
func encodeTop(t testing.TB, e *Encoder, r TopReport) ([]byte, TopReport, int) {
	t.Helper()
	var pkt []byte
	dropped, err := e.EncodeTop(testNow, r, func(p []byte) error {
		if pkt != nil {
			t.Fatal("EncodeTop emitted two datagrams")
		}
		pkt = bytes.Clone(p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(pkt, e.Key)
	if err != nil || m.Type != MsgTop || m.Top == nil {
		t.Fatalf("decoding %x: %+v, %v", pkt, m, err)
	}
	return pkt, *m.Top, dropped
}

func TestTopRoundTrip(t *testing.T) {
	r := topGolden
	r.LeftOut = [2]uint64{7, math.MaxUint64}
	r.Lists = append(slices.Clone(r.Lists), TopList{Policy: "big", By: top.Refused, Summary: topk.Summary{
		Total: math.MaxUint64, Floor: 1 << 33, Items: []topk.Item{{Key: "\x00\xff", Count: math.MaxUint64, Err: 1 << 40}}}},
		TopList{Policy: "none", By: top.Served})
	for _, key := range [][]byte{nil, []byte("secret")} {
		_, got, dropped := encodeTop(t, &Encoder{Node: 3, MaxPacket: 1400, Key: key}, r)
		if dropped != 0 || !reflect.DeepEqual(got, r) {
			t.Fatalf("key %q: dropped %d, got\n%+v\nwant\n%+v", key, dropped, got, r)
		}
	}
	// An empty report is one datagram with no lists.
	if _, got, _ := encodeTop(t, &Encoder{Node: 3, MaxPacket: 512}, TopReport{}); len(got.Lists) != 0 || got.LeftOut != [2]uint64{} {
		t.Fatalf("empty report: %+v", got)
	}
}

// TestTopFits: many policies with long tags never make a datagram longer
// than MaxPacket; the lists share it in turns; a list cut short or left
// out states the most what it lost counted.
func TestTopFits(t *testing.T) {
	for _, size := range []int{MinPacket, 1400, 9000} {
		for _, policies := range []int{1, 3, 40, 400} {
			for _, keyLen := range []int{13, 200, 5000} {
				// The lists' items are the same 100, made once: 800
				// lists of 100 keys of 5000 bytes apiece would be 400 MB.
				items := make([]topk.Item, 100)
				for i := range items {
					items[i] = topk.Item{Key: fmt.Sprintf("%0*d", keyLen, i), Count: uint64(1000 - i), Err: 1}
				}
				var r TopReport
				for p := range policies {
					for _, by := range []top.By{top.Refused, top.Served} {
						l := TopList{Policy: fmt.Sprintf("policy-%03d", p), By: by, Summary: topk.Summary{Total: uint64(1e6 - p), Floor: 3}}
						l.Items = items
						r.Lists = append(r.Lists, l)
					}
				}
				name := fmt.Sprintf("%d bytes, %d policies, keys of %d", size, policies, keyLen)
				e := &Encoder{Node: 1, MaxPacket: size, Key: []byte("k")}
				pkt, got, dropped := encodeTop(t, e, r)
				if len(pkt) > size {
					t.Fatalf("%s: datagram of %d bytes", name, len(pkt))
				}
				checkFit(t, name, r, got, dropped)
			}
		}
	}
}

// checkFit holds what was sent of r to its guarantees.
func checkFit(t *testing.T, name string, r, got TopReport, dropped int) {
	t.Helper()
	sentTags, all, fewest, most := 0, 0, math.MaxInt, 0
	for _, l := range r.Lists {
		all += len(l.Items)
	}
	for _, g := range got.Lists {
		i := slices.IndexFunc(r.Lists, func(l TopList) bool { return l.Policy == g.Policy && l.By == g.By })
		l := r.Lists[i]
		n := len(g.Items)
		sentTags += n
		if !slices.Equal(g.Items, l.Items[:n]) || g.Total != l.Total {
			t.Fatalf("%s: %s sent %v, not its %d heaviest tags and total", name, g.Policy, g.Items, n)
		}
		want := l.Floor
		if n < len(l.Items) {
			want = max(want, l.Items[n].Count)
		}
		if g.Floor != want {
			t.Fatalf("%s: %s cut to %d tags, floor %d, want %d", name, g.Policy, n, g.Floor, want)
		}
		fewest, most = min(fewest, n), max(most, n)
	}
	if sentTags+dropped != all {
		t.Fatalf("%s: %d tags sent and %d dropped of %d", name, sentTags, dropped, all)
	}
	if len(got.Lists) > 0 && most-fewest > 1 {
		t.Fatalf("%s: lists sent from %d to %d tags: not shared in turns", name, fewest, most)
	}
	if len(got.Lists) < len(r.Lists) {
		for by := range got.LeftOut {
			if got.LeftOut[by] != 1000 {
				t.Fatalf("%s: lists left out, LeftOut %v, want 1000 each", name, got.LeftOut)
			}
		}
		// The lists kept are those of the highest totals.
		for _, g := range got.Lists {
			var p int
			fmt.Sscanf(g.Policy, "policy-%d", &p)
			if p >= len(got.Lists) {
				t.Fatalf("%s: %s kept among %d lists, before heavier ones", name, g.Policy, len(got.Lists))
			}
		}
	}
}

// TestTopSkips: lists with no policy or an unknown by, and tags with an
// empty key, are not sent, and are counted in dropped when they had tags.
func TestTopSkips(t *testing.T) {
	r := TopReport{Lists: []TopList{
		{Policy: "", Summary: topk.Summary{Items: []topk.Item{{Key: "a", Count: 1}}}},
		{Policy: "x", By: 7, Summary: topk.Summary{Items: []topk.Item{{Key: "a", Count: 1}}}},
		{Policy: "y", Summary: topk.Summary{Total: 3, Items: []topk.Item{{Key: "", Count: 2}, {Key: "b", Count: 1}}}},
	}}
	_, got, dropped := encodeTop(t, &Encoder{Node: 1, MaxPacket: 512}, r)
	want := TopReport{Lists: []TopList{{Policy: "y", Summary: topk.Summary{Total: 3, Items: []topk.Item{{Key: "b", Count: 1}}}}}}
	if dropped != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("dropped %d, got %+v; want 2 and %+v", dropped, got, want)
	}
}

func TestTopMalformed(t *testing.T) {
	h := func(body ...byte) []byte {
		b := make([]byte, headerLen, headerLen+len(body))
		copy(b, "DT\x01\x09")
		b[5+7], b[13+7] = 1, 1
		return append(b, body...)
	}
	list := func(tags ...byte) []byte { return append([]byte{0x95, 0xa1, 'p', 0, 1, 0}, tags...) }
	for name, b := range map[string][]byte{
		"not an array":      h(0x80),
		"two elements":      h(0x92, 0, 0),
		"left out negative": h(0x93, 0xff, 0, 0x90),
		"left out a str":    h(0x93, 0xa1, 'x', 0, 0x90),
		"lists not array":   h(0x93, 0, 0, 0x80),
		"lists claim 9":     h(0x93, 0, 0, 0x99),
		"list of four":      h(0x93, 0, 0, 0x91, 0x94, 0xa1, 'p', 0, 1, 0),
		"policy an int":     h(0x93, 0, 0, 0x91, 0x95, 1, 0, 1, 0, 0x90),
		"tags not triples":  h(append([]byte{0x93, 0, 0, 0x91}, list(0x92, 0xa1, 'k', 1)...)...),
		"tags claim more":   h(append([]byte{0x93, 0, 0, 0x91}, list(0x96, 0xa1, 'k', 1, 0)...)...),
		"count negative":    h(append([]byte{0x93, 0, 0, 0x91}, list(0x93, 0xa1, 'k', 0xd0, 0x80, 0)...)...),
		"count a float":     h(append([]byte{0x93, 0, 0, 0x91}, list(0x93, 0xa1, 'k', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0)...)...),
		"key an int":        h(append([]byte{0x93, 0, 0, 0x91}, list(0x93, 1, 1, 0)...)...),
		"trailing":          h(append([]byte{0x93, 0, 0, 0x91}, list(0x90, 0)...)...),
		"truncated":         h(append([]byte{0x93, 0, 0, 0x91}, list(0x93, 0xa1, 'k', 0xcd, 1)...)...),
	} {
		if _, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	// What a receiver drops without failing: a list of an unknown by, one
	// with no policy, a tag with an empty key; any integer encoding.
	ok := h(0x93, 0xd0, 5, 0xcf, 0, 0, 0, 0, 0, 0, 0, 9, 0x93,
		0x95, 0xa1, 'p', 2, 1, 0, 0x90, // by 2: skipped
		0x95, 0xa0, 0, 1, 0, 0x90, // no policy: skipped
		0x95, 0xc4, 1, 'q', 0xd1, 0, 1, 0xcc, 3, 0, 0x96, 0xa0, 1, 0, 0xa1, 'k', 0xce, 0, 0, 1, 0, 0)
	m, err := Decode(ok, nil)
	want := TopReport{LeftOut: [2]uint64{5, 9}, Lists: []TopList{{Policy: "q", By: top.Served, Summary: topk.Summary{
		Total: 3, Items: []topk.Item{{Key: "k", Count: 256}}}}}}
	if err != nil || !reflect.DeepEqual(*m.Top, want) {
		t.Fatalf("Decode = %+v, %v; want %+v", m.Top, err, want)
	}
}

// TestTopGolden pins MsgTop to testdata/golden_top.hex, both ways: the
// bytes docs/wire-format.md shows.
func TestTopGolden(t *testing.T) {
	want := readHex(t, "testdata/golden_top.hex")
	e := &Encoder{Node: 0x0102030405060708, Fingerprint: 0x1122334455667788, MaxPacket: 1400, Key: []byte("secret")}
	e.seq = 43
	var got []byte
	e.EncodeTop(time.UnixMilli(1767225600000), topGolden, func(p []byte) error {
		got = bytes.Clone(p)
		return nil
	})
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeTop:\n%x\nwant testdata/golden_top.hex:\n%x", got, want)
	}
	m, err := Decode(want, []byte("secret"))
	if err != nil || m.Type != MsgTop || m.Seq != 44 || m.Node != 0x0102030405060708 || !reflect.DeepEqual(*m.Top, topGolden) {
		t.Fatalf("Decode(golden) = %+v %+v, %v", m, m.Top, err)
	}
	if _, err := Decode(want, []byte("another secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("Decode under another key: %v, want ErrAuth", err)
	}
}
