// Benchmarks of the datagram format over a million distinct tags.

package wire

import (
	"testing"

	"github.com/dthrottle/dthrottle/internal/benchdata"
)

func BenchmarkEncode1M(b *testing.B) {
	hits := benchdata.Hits()
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
	b.ReportMetric(float64(benchdata.Tags)*float64(b.N)/b.Elapsed().Seconds(), "tags/s")
	b.ReportMetric(float64(bytes)/benchdata.Tags, "bytes/tag")
	b.ReportMetric(float64(pkts), "datagrams")
}

func BenchmarkDecode1M(b *testing.B) {
	key := []byte("secret")
	e := &Encoder{Node: 1, Fingerprint: 2, MaxPacket: 1400, Key: key}
	pkts, _ := encodeAll(b, e, testNow, benchdata.Hits())
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
		if n != benchdata.Tags {
			b.Fatalf("decoded %d tags, want %d", n, benchdata.Tags)
		}
	}
	b.ReportMetric(float64(benchdata.Tags)*float64(b.N)/b.Elapsed().Seconds(), "tags/s")
	b.ReportMetric(float64(bytes)/benchdata.Tags, "bytes/tag")
}
