package httpapi

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// discard is a ResponseWriter that keeps one header map, as net/http's
// own does per request.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkServeHTTP is the endpoint's own cost per request: parsing, the
// decision and the header values, without net/http's reading and writing.
func BenchmarkServeHTTP(b *testing.B) {
	tb := newTable(b, bucket.Policy{Rate: 1e9, Burst: 1000})
	s := New(tb, Config{})
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/v1/allow?tag=203.0.113."+strconv.Itoa(i), nil)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		clear(w.h)
		s.ServeHTTP(w, reqs[i%len(reqs)])
	}
}

// BenchmarkServeHTTPStated is BenchmarkServeHTTP with a limit stated
// per request, a thousand a day, decided by the table's AllowQuota.
func BenchmarkServeHTTPStated(b *testing.B) {
	tb := newTable(b, bucket.Policy{Rate: 1e9, Burst: 1000})
	s := New(tb, Config{Limiter: tb})
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/v1/allow?tag=203.0.113."+strconv.Itoa(i)+"&limit=1000&per=24h", nil)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		clear(w.h)
		s.ServeHTTP(w, reqs[i%len(reqs)])
	}
}

// BenchmarkEndpoint is a whole request and answer over one keep-alive
// loopback connection, one in flight: net/http's cost included. The
// client reads the answer without allocating, so the allocations
// reported are the server's.
func BenchmarkEndpoint(b *testing.B) {
	tb := newTable(b, bucket.Policy{Rate: 1e9, Burst: 1000})
	_, addr := startServer(b, tb, Config{})
	c := dial(b, addr)
	c.c.SetDeadline(time500s())
	reqs := make([][]byte, 1000)
	for i := range reqs {
		reqs[i] = []byte("GET /v1/allow?tag=203.0.113." + strconv.Itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	r := bufio.NewReader(c.c)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := c.c.Write(reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		line, err := r.ReadSlice('\n')
		if err != nil || !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			b.Fatalf("status line %q, %v", line, err)
		}
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) == 2 {
				break
			}
		}
		if _, err := r.Discard(3); err != nil {
			b.Fatal(err)
		}
	}
}
