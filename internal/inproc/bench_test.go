package inproc

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkDecide is one decision through a Table against a real daemon,
// by workload: "known", tags the table holds (decided in process);
// "new", a tag never seen on every query (asked over the socket, which
// inserts it); "full", new tags into a table at max_tags (the daemon
// evicts to insert each); "socket", known tags with sharing off. One
// goroutine, so "new", "full" and "socket" are a round trip each:
//
//	go test ./internal/inproc -run '^$' -bench Decide -benchtime 100000x
func BenchmarkDecide(b *testing.B) {
	const tags = 10000
	for _, w := range []string{"known", "new", "full", "socket"} {
		b.Run(w, func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "d.sock")
			limit := "rate = 1e9\nburst = 1000000"
			if w == "full" {
				limit += fmt.Sprintf("\nmax_tags = %d", tags)
			}
			stop := run(b, sock, limit, w != "socket")
			defer stop()
			tb, err := Open(sock, true)
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			keys := make([][]byte, tags)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "10.0.%d.%d", i>>8, i&255)
				tb.Decide(keys[i]) // known from now on (a full table from here)
			}
			want := map[string]Path{"known": Local, "new": Asked, "full": Asked, "socket": Asked}[w]
			before := tb.Stats()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key := keys[i%tags]
				if w == "new" || w == "full" {
					key = fmt.Appendf(key[:0:0], "new.%d", i)
				}
				if r := tb.Decide(key); !r.OK || r.Path != want {
					b.Fatalf("%s: query %d: %+v, want OK by path %d", w, i, r, want)
				}
			}
			b.StopTimer()
			st := tb.Stats()
			b.ReportMetric(float64(st.Local-before.Local)/float64(b.N), "local/op")
		})
	}
}
