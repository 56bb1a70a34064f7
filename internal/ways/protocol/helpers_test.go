package protocol

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// ioTimeout bounds every client read and write in tests, so that a bug fails
// the test instead of hanging it. It is never used to synchronise.
const ioTimeout = 20 * time.Second

// countDecider answers from each tag's length and how many times the tag
// has been asked about, so that replies out of order are caught: the n-th
// query of tag is OK unless (n+len(tag)) is a multiple of 3.
type countDecider struct {
	calls atomic.Int64

	mu   sync.Mutex
	seen map[string]int
}

func newCountDecider() *countDecider {
	return &countDecider{seen: make(map[string]int)}
}

func (d *countDecider) Allow(_ time.Time, tag []byte) bool {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.seen[string(tag)] + 1
	d.seen[string(tag)] = n
	return countAllows(n, tag)
}

func countAllows(n int, tag []byte) bool { return (n+len(tag))%3 != 0 }

// countModel computes, sequentially, the replies of a fresh countDecider to
// tags (after '\r' stripping). Empty tags are OK and not counted.
func countModel(tags []string) []byte {
	seen := make(map[string]int)
	var out []byte
	for _, tag := range tags {
		if tag == "" {
			out = appendReply(out, true)
			continue
		}
		seen[tag]++
		out = appendReply(out, countAllows(seen[tag], []byte(tag)))
	}
	return out
}

// diffReplies describes the first difference between two reply streams.
func diffReplies(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	for i := 0; i < len(got) && i < len(want); i += replyLen {
		if !bytes.Equal(got[i:min(i+replyLen, len(got))], want[i:min(i+replyLen, len(want))]) {
			return fmt.Sprintf("reply %d: got %q, want %q (got %d bytes, want %d)",
				i/replyLen, got[i:min(i+replyLen, len(got))], want[i:min(i+replyLen, len(want))], len(got), len(want))
		}
	}
	return fmt.Sprintf("got %d bytes of replies, want %d", len(got), len(want))
}

// recordDecider records copies of the tags it is given and allows the tags
// of even length.
type recordDecider struct {
	mu   sync.Mutex
	tags [][]byte
}

func (d *recordDecider) Allow(_ time.Time, tag []byte) bool {
	d.mu.Lock()
	d.tags = append(d.tags, bytes.Clone(tag))
	d.mu.Unlock()
	return evenLen(tag)
}

func (d *recordDecider) seen() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]byte(nil), d.tags...)
}

func evenLen(tag []byte) bool { return len(tag)%2 == 0 }

// blockDecider allows every tag; on the tag "block" it signals entered and
// waits for release to be closed.
type blockDecider struct {
	entered chan struct{}
	release chan struct{}
}

func (d *blockDecider) Allow(_ time.Time, tag []byte) bool {
	if string(tag) == "block" {
		close(d.entered)
		<-d.release
	}
	return true
}

// parityDecider answers from the tag's first byte; it allocates nothing.
type parityDecider struct{}

func (parityDecider) Allow(_ time.Time, tag []byte) bool { return tag[0]&1 == 0 }

// listen returns a fresh listener: a Unix socket in a temporary directory
// for "unix", 127.0.0.1:0 for "tcp".
func listen(t testing.TB, network string) net.Listener {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "d.sock")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	return l
}

// testServer is a Server serving listeners, whose Serve results are checked
// when the test ends.
type testServer struct {
	*Server
	listeners []net.Listener
	served    chan error // one value per Serve return
}

// startServer serves one listener per network with a new Server. The
// server is closed when the test ends, and every Serve must return nil.
func startServer(t testing.TB, d decide.Allower, cfg Config, networks ...string) *testServer {
	t.Helper()
	ts := &testServer{Server: NewServer(d, cfg), served: make(chan error, len(networks))}
	for _, n := range networks {
		ts.listeners = append(ts.listeners, listen(t, n))
	}
	ts.serve()
	t.Cleanup(func() {
		if err := ts.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		ts.waitServed(t)
	})
	return ts
}

// serve starts one Serve per listener.
func (ts *testServer) serve() {
	for _, l := range ts.listeners {
		go func() { ts.served <- ts.Serve(l) }()
	}
}

// waitServed waits for every Serve to return and checks each returned nil.
func (ts *testServer) waitServed(t testing.TB) {
	t.Helper()
	for range ts.listeners {
		if err := testkit.Recv(t, ts.served, ioTimeout, "Serve to return"); err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	}
	ts.listeners = nil
}

// addr returns the address of listener i.
func (ts *testServer) addr(i int) net.Addr { return ts.listeners[i].Addr() }

// dial connects to addr with an I/O deadline set.
func dial(t testing.TB, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(addr.Network(), addr.String(), ioTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// dialMem connects to l, an in-memory listener; the connection is closed
// when the test ends.
func dialMem(t testing.TB, l *testkit.Listener) *testkit.Conn {
	t.Helper()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// query sends one request on c and returns the reply.
func query(t testing.TB, c net.Conn, tag string) string {
	t.Helper()
	if _, err := io.WriteString(c, tag+"\n"); err != nil {
		t.Fatalf("write %q: %v", tag, err)
	}
	reply := make([]byte, replyLen)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("reading reply to %q: %v", tag, err)
	}
	return string(reply)
}

// readAll reads c to end of file and returns what was read; a reset after
// end of data counts as end of file.
func readAll(t testing.TB, c net.Conn) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil && !isReset(err) {
		t.Fatalf("reading to end of file: %v (after %d bytes)", err, len(b))
	}
	return b
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// closeWrite half-closes c.
func closeWrite(t testing.TB, c net.Conn) {
	t.Helper()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T cannot half-close", c)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
}

// writeAsync writes b to c in a goroutine; the returned channel yields the
// write's error.
func writeAsync(c net.Conn, b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		done <- err
	}()
	return done
}

// lines joins tags as request lines.
func lines(tags ...string) []byte {
	var b bytes.Buffer
	for _, tag := range tags {
		b.WriteString(tag)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// shutdown calls Shutdown with ioTimeout.
func shutdown(t testing.TB, s *Server) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	return s.Shutdown(ctx)
}

// attrs renders a record's attributes as key=value text.
func attrs(r slog.Record) string {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	r.Attrs(func(a slog.Attr) bool {
		w.WriteString(a.Key + "=" + a.Value.String() + " ")
		return true
	})
	w.Flush()
	return b.String()
}
