package protocol

import (
	"io"
	"net"
	"testing"
	"time"
)

// benchConn dials the server's first listener, without the tests' I/O
// deadline, which a long benchmark could outlast.
func benchConn(b *testing.B, ts *testServer) net.Conn {
	b.Helper()
	c := dial(b, ts.addr(0))
	c.SetDeadline(time.Time{})
	return c
}

// BenchmarkServerPingPong measures one client over a Unix socket sending one
// query and waiting for its reply. One op is one query.
func BenchmarkServerPingPong(b *testing.B) {
	ts := startServer(b, parityDecider{}, Config{}, "unix")
	c := benchConn(b, ts)
	req := []byte("10.1.2.3\n")
	reply := make([]byte, replyLen)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerPingPongParallel is BenchmarkServerPingPong with 16
// clients per CPU, each on its own connection.
func BenchmarkServerPingPongParallel(b *testing.B) {
	ts := startServer(b, parityDecider{}, Config{}, "unix")
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("unix", ts.addr(0).String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		req := []byte("10.1.2.3\n")
		reply := make([]byte, replyLen)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			if _, err := io.ReadFull(c, reply); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkServerPipelined measures one client over a Unix socket writing
// batches of 64 queries and reading the 64 replies. One op is one query.
func BenchmarkServerPipelined(b *testing.B) {
	const batch = 64
	ts := startServer(b, parityDecider{}, Config{}, "unix")
	c := benchConn(b, ts)
	req := benchLines(batch)
	replies := make([]byte, batch*replyLen)
	b.ReportAllocs()
	b.SetBytes(int64(len(req) / batch))
	for i := 0; i < b.N; i += batch {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, replies); err != nil {
			b.Fatal(err)
		}
	}
}
