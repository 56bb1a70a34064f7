// Benchmarks of the datagram format over a million distinct tags.

package wire

import (
	"fmt"
	"testing"
)

const benchTags = 1000000

// benchHits is a million distinct IPv4 tags in 10.0.0.0/8, 8 to 14 bytes,
// with small counts.
func benchHits() []Hit {
	hits := make([]Hit, benchTags)
	for i := range hits {
		n := i + 1<<20 // from 10.16.0.0, so the second octet has 2 digits
		hits[i] = Hit{Key: fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&0xff, n&0xff), Count: uint32(i%300 + 1)}
	}
	return hits
}

func BenchmarkEncode1M(b *testing.B) {
	hits := benchHits()
	e := &Encoder{Node: 1, Fingerprint: 2, MaxPacket: 1400, Key: []byte("secret")}
	var bytes, pkts int
	emit := func(pkt []byte) error {
		bytes += len(pkt)
		pkts++
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		bytes, pkts = 0, 0
		if _, err := e.Encode(testNow, hits, emit); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchTags)*float64(b.N)/b.Elapsed().Seconds(), "tags/s")
	b.ReportMetric(float64(bytes)/benchTags, "bytes/tag")
	b.ReportMetric(float64(pkts), "datagrams")
}

func BenchmarkDecode1M(b *testing.B) {
	key := []byte("secret")
	e := &Encoder{Node: 1, Fingerprint: 2, MaxPacket: 1400, Key: key}
	pkts, _ := encodeAll(b, e, testNow, benchHits())
	bytes := 0
	for _, pkt := range pkts {
		bytes += len(pkt)
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for _, pkt := range pkts {
			m, err := Decode(pkt, key)
			if err != nil {
				b.Fatal(err)
			}
			n += len(m.Hits)
		}
		if n != benchTags {
			b.Fatalf("decoded %d tags, want %d", n, benchTags)
		}
	}
	b.ReportMetric(float64(benchTags)*float64(b.N)/b.Elapsed().Seconds(), "tags/s")
	b.ReportMetric(float64(bytes)/benchTags, "bytes/tag")
}
