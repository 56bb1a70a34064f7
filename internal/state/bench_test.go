package state

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// millionTable is a table of 2^20 tags, each below its burst.
func millionTable(b *testing.B) *bucket.Table {
	tb := newTable(b, 2<<20)
	for i := range 1 << 20 {
		tb.Allow(at(0), []byte(fmt.Sprintf("203.%d.%d.%d", i>>16, i>>8&255, i&255)))
	}
	if n := tb.Stats().Tags; n != 1<<20 {
		b.Fatalf("%d tags", n)
	}
	return tb
}

// BenchmarkSave writes a million tags to a state file (on the test's
// temporary directory, usually tmpfs or the page cache; fsync included).
func BenchmarkSave(b *testing.B) {
	tb := millionTable(b)
	path := filepath.Join(b.TempDir(), "state")
	b.ReportAllocs()
	b.ResetTimer()
	var info Info
	for range b.N {
		var err error
		if info, err = Save(path, tb, at(0), at(0)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(info.Bytes)/float64(info.Tags), "bytes/tag")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/million")
}

// BenchmarkLoad reads a million tags back into an empty table.
func BenchmarkLoad(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state")
	if _, err := Save(path, millionTable(b), at(0), at(0)); err != nil {
		b.Fatal(err)
	}
	lim := Limits{MaxAge: time.Minute, MaxTags: 2 << 20, MaxBytes: 1 << 30}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fresh := newTable(b, 2<<20)
		b.StartTimer()
		info, err := Load(path, fresh, at(0), at(0), lim)
		if err != nil || info.Adopted != 1<<20 {
			b.Fatalf("%+v, %v", info, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/million")
}
