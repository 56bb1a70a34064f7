package hapeers

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestBatchReader reads a loopback connection under the low-water mark:
// a few bytes, far below it, still reach a reader that waits for them;
// the mark is back up after each wait; a deadline and the end of the
// stream are reported as by a plain read.
func TestBatchReader(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	r := newBatchReader(server)
	if r.rc == nil {
		t.Fatal("the low-water mark was not set on a TCP connection")
	}
	if got := lowWaterOf(t, server); got != lowWater {
		t.Fatalf("SO_RCVLOWAT %d, want %d", got, lowWater)
	}
	buf := make([]byte, 100)
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := r.read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("nothing sent: read %d, %v", n, err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		client.Write([]byte("abc"))
	}()
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	n, err := r.read(buf)
	if err != nil || string(buf[:n]) != "abc" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("three bytes below the mark waited %v, the deadline's time", time.Since(start))
	}
	if got := lowWaterOf(t, server); got != lowWater || r.low {
		t.Errorf("after the wait SO_RCVLOWAT %d, want %d", got, lowWater)
	}
	// Bytes that arrived while the reader slept are taken at once.
	client.Write([]byte("defg"))
	time.Sleep(20 * time.Millisecond)
	if n, err := r.read(buf); err != nil || string(buf[:n]) != "defg" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	client.Close()
	if n, err := r.read(buf); n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: read %d, %v", n, err)
	}
	r.close()
	if got := lowWaterOf(t, server); got != 1 {
		t.Errorf("closed: SO_RCVLOWAT %d, want 1", got)
	}
}

func lowWaterOf(t *testing.T, nc net.Conn) int {
	t.Helper()
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}
