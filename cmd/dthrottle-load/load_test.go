package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/procstat"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

func TestAppendTag(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100000; i++ {
		tag := string(appendTag(nil, 'a', i))
		if len(tag) != tagLen || tag[0] != 'a' || seen[tag] {
			t.Fatalf("tag %d: %q (length %d, seen before: %v)", i, tag, len(tag), seen[tag])
		}
		seen[tag] = true
	}
	if a, b := appendTag(nil, 'a', 7), appendTag(nil, 'b', 7); bytes.Equal(a, b) {
		t.Fatal("namespaces share tags")
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.07 || d > 0.07 {
			t.Errorf("quantile(%v) = %v, want %v within 7%%", c.q, got, c.want)
		}
	}
	for ns := uint64(1); ns < 1<<40; ns = ns*3 + 1 {
		if b := bucketOf(ns); lowest(b) > ns || lowest(b+1) <= ns {
			t.Fatalf("%d ns in bucket %d, which holds [%d, %d)", ns, b, lowest(b), lowest(b+1))
		}
	}
}

func TestReplies(t *testing.T) {
	n, replies, ok, err := lineProto{}.Replies([]byte("OK\nNO\nOK\nO"))
	if n != 9 || replies != 3 || ok != 2 || err != nil {
		t.Errorf("line replies: %d bytes, %d replies, %d OK, %v", n, replies, ok, err)
	}
	if _, _, _, err := (lineProto{}).Replies([]byte("OK\nXX\n")); err == nil {
		t.Error("bad line reply accepted")
	}
	rp := newRedisProto(0.01, 1000000)
	n, replies, ok, err = rp.Replies([]byte(":1\r\n:0\r\n:1\r"))
	if n != 8 || replies != 2 || ok != 1 || err != nil {
		t.Errorf("redis replies: %d bytes, %d replies, %d OK, %v", n, replies, ok, err)
	}
	if _, _, _, err := rp.Replies([]byte("-NOSCRIPT No matching script\r\n")); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		t.Errorf("redis error reply: %v", err)
	}
	req := string(rp.Request(nil, []byte("tag")))
	if !strings.HasPrefix(req, "*6\r\n$7\r\nEVALSHA\r\n$40\r\n") || !strings.Contains(req, "\r\n$3\r\ntag\r\n$4\r\n0.01\r\n$7\r\n1000000\r\n") {
		t.Errorf("redis request %q", req)
	}
}

// listenUnix listens on a socket in the test's temporary directory.
func listenUnix(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLoadAgainstEcho runs a short load against the echo server: every
// reply OK, a rate and round trips measured.
func TestLoadAgainstEcho(t *testing.T) {
	l := listenUnix(t)
	go serveEcho(l)
	if err := Prefill("unix", l.Addr().String(), lineProto{}, 'p', 0, 1000, 3, 100); err != nil {
		t.Fatal(err)
	}
	res, err := Load{Network: "unix", Addr: l.Addr().String(), Proto: lineProto{}, Conns: 3, Depth: 16,
		Tags: 500, NS: 'a', Duration: 100 * time.Millisecond}.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res.Queries == 0 || res.OK != res.Queries || res.Queries%16 != 0 || res.P50 <= 0 || res.P99 < res.P50 {
		t.Fatalf("result %+v", res)
	}
}

// TestLoadCountsRefusals runs a load against the real line server and
// table with a burst of 2: every tag is served twice, then refused.
func TestLoadCountsRefusals(t *testing.T) {
	tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1e-6, Burst: 2}, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	l := listenUnix(t)
	srv := protocol.NewServer(tb, protocol.Config{})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	res, err := Load{Network: "unix", Addr: l.Addr().String(), Proto: lineProto{}, Conns: 2, Depth: 8,
		Tags: 100, NS: 'a', Duration: 100 * time.Millisecond}.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res.Queries <= 200 || res.OK > 200 {
		t.Fatalf("%d queries, %d OK: want more than 200 queries and at most 2 OK per tag", res.Queries, res.OK)
	}
}

// BenchmarkServerTable is the server path with the real table behind it:
// one connection pipelining 64 queries over 10,000 tags already tracked,
// the replies read before the next 64. One op is one query; allocations
// are counted on both sides of the socket, all in this process.
func BenchmarkServerTable(b *testing.B) {
	for _, mode := range []string{"one-by-one", "batched"} {
		b.Run(mode, func(b *testing.B) {
			tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 0.01, Burst: 1000000}, MaxTags: 20000, MaxTagBytes: 256})
			if err != nil {
				b.Fatal(err)
			}
			var d decide.Allower = tb // as dthrottled asks it: in batches
			if mode == "one-by-one" {
				d = oneByOne{tb}
			}
			l := listenUnix(b)
			srv := protocol.NewServer(d, protocol.Config{})
			go srv.Serve(l)
			b.Cleanup(func() { srv.Close() })
			if err := Prefill("unix", l.Addr().String(), lineProto{}, 'a', 0, 10000, 1, 256); err != nil {
				b.Fatal(err)
			}
			c, err := net.Dial("unix", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf, offs := stream(lineProto{}, 'a', 10000, 64, 1<<16, rand.New(rand.NewPCG(1, 2)))
			replies := make([]byte, 64*3)
			b.ReportAllocs()
			batch := 0
			for i := 0; i < b.N; i += 64 {
				if _, err := c.Write(buf[offs[batch*64]:offs[batch*64+64]]); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, replies); err != nil {
					b.Fatal(err)
				}
				if batch++; (batch+1)*64 >= len(offs) {
					batch = 0
				}
			}
		})
	}
}

// oneByOne hides the table's AllowBatch.
type oneByOne struct{ t *bucket.Table }

func (d oneByOne) Allow(now time.Time, tag []byte) bool { return d.t.Allow(now, tag) }

// TestMapTable checks the map+mutex reference against docs/design.md, Semantics: a
// burst, then refusals, then one token back per 1/rate.
func TestMapTable(t *testing.T) {
	m := newMapTable(2, 3) // 2 tokens/s, burst 3
	const s = int64(time.Second)
	var got []bool
	for _, at := range []int64{0, 0, 0, 0, s / 4, s / 2, s / 2, 10 * s, 10 * s, 10 * s, 10 * s} {
		got = append(got, m.decide(at, []byte("a")))
	}
	want := []bool{true, true, true, false, false, true, false, true, true, true, false}
	if !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if !m.decide(0, []byte("b")) {
		t.Fatal("another tag has its own bucket")
	}
}

// TestLoadAgainstMap runs a load against the map+mutex server with a
// burst of 2: every tag is served twice, then refused.
func TestLoadAgainstMap(t *testing.T) {
	l := listenUnix(t)
	go serveLines(l, newMapTable(1e-6, 2).decide)
	res, err := Load{Network: "unix", Addr: l.Addr().String(), Proto: lineProto{}, Conns: 2, Depth: 8,
		Tags: 100, NS: 'a', Duration: 100 * time.Millisecond}.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res.Queries <= 200 || res.OK > 200 {
		t.Fatalf("%d queries, %d OK: want more than 200 queries and at most 2 OK per tag", res.Queries, res.OK)
	}
}

// TestCPUTime reads this process's CPU time from /proc while a thread
// spends a known CPU time (its own clock): the process's time grows by at
// least that much, less the 10 ms ticks /proc counts in, however loaded
// the machine is.
func TestCPUTime(t *testing.T) {
	if _, err := procstat.CPU(0); err == nil {
		t.Fatal("procstat.CPU(0) gave no error")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := procstat.CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start := threadCPU()
	for threadCPU()-start < 100*time.Millisecond {
		runtime.KeepAlive(spin(1, 1000))
	}
	spent := threadCPU() - start
	after, err := procstat.CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < spent-20*time.Millisecond || d > spent+10*time.Second {
		t.Fatalf("the process's CPU time grew by %v while one thread spent %v", d, spent)
	}
}

// TestBurner spends about the CPU time asked for on every query, on the
// thread's own clock, which other processes taking the CPU do not move.
func TestBurner(t *testing.T) {
	decide := burner(200 * time.Microsecond)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	for range 500 {
		if !decide(0, []byte("a")) {
			t.Fatal("a burner said NO")
		}
	}
	// 500 x 200 µs = 100 ms.
	if d := threadCPU() - start; d < 70*time.Millisecond || d > 200*time.Millisecond {
		t.Fatalf("500 queries burning 200µs each took %v of CPU time", d)
	}
}
