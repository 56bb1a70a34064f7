package hapeers

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// BenchmarkBookBytes reports what an entry of an IPv4 table costs the
// book (its key, tag, counter and place in the rounds), the table's own
// memory aside:
//
//	go test ./internal/ways/hapeers -run '^$' -bench BookBytes
func BenchmarkBookBytes(b *testing.B) {
	const n = 100000
	table, err := bucket.New(bucket.Config{Default: bucket.Policy{Name: "default", Rate: 1, Burst: 5}, MaxTags: 2 * n, MaxTagBytes: 256})
	if err != nil {
		b.Fatal(err)
	}
	def := &Definition{Name: "/web", KeyType: KeyIPv4, KeyLen: 4, Data: 1<<dtGPT0 | 1<<dtGPC0}
	now := time.Unix(1_800_000_000, 0)
	var perEntry float64
	for b.Loop() {
		bk := newBook(nopTable{table}, Config{Tables: []string{"web"}, Counter: "gpc0", MaxKeys: n}, &counters{})
		bk.define(*def)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var key [4]byte
		for i := range n {
			binary.BigEndian.PutUint32(key[:], uint32(i)+1<<24)
			u := Update{Key: key[:]}
			u.Values[dtGPC0] = 1
			bk.apply(now, 1, 0, def, &u)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(bk)
	}
	b.ReportMetric(perEntry, "bytes/entry")
}

// nopTable checks against a real table but charges nothing, so that the
// table's memory stays out of the book's figure.
type nopTable struct{ t *bucket.Table }

func (nopTable) Charge(time.Time, []byte, uint32) {}
func (n nopTable) Check(now time.Time, tag []byte, c int) bucket.Verdict {
	return n.t.Check(now, tag, c)
}
