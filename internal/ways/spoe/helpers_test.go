package spoe

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// The HAProxy side of SPOP, as much as the tests need: frames built by
// hand, and a reader of the agent's frames.

// frame builds a whole frame, length prefix included.
func frame(typ byte, flags uint32, streamID, frameID uint64, payload []byte) []byte {
	b := []byte{0, 0, 0, 0, typ}
	b = binary.BigEndian.AppendUint32(b, flags)
	b = appendVarint(b, streamID)
	b = appendVarint(b, frameID)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// kv is one item of a KV-LIST to build.
type kv struct {
	name string
	v    []byte // a typed value, built by str, u32, boolean
}

func str(s string) []byte { return appendTypedString(nil, []byte(s)) }
func u32(v uint32) []byte { return appendTypedUint32(nil, v) }
func boolean(t bool) []byte {
	if t {
		return []byte{typeBool | boolTrue}
	}
	return []byte{typeBool}
}
func ipv4(a ...byte) []byte { return append([]byte{typeIPv4}, a...) }

func kvList(items ...kv) []byte {
	var b []byte
	for _, it := range items {
		b = appendString(b, it.name)
		b = append(b, it.v...)
	}
	return b
}

// helloFrame is the HAPROXY-HELLO HAProxy 2.6 sends.
func helloFrame(extra ...kv) []byte {
	items := append([]kv{
		{"supported-versions", str("2.0")},
		{"max-frame-size", u32(16380)},
		{"capabilities", str("pipelining,async")},
		{"engine-id", str("test-engine")},
	}, extra...)
	return frame(frameHAProxyHello, flagFin, 0, 0, kvList(items...))
}

// notifyFrame is a NOTIFY of one message with the arguments given.
func notifyFrame(streamID, frameID uint64, args ...kv) []byte {
	p := appendString(nil, "dthrottle-check")
	p = append(p, byte(len(args)))
	p = append(p, kvList(args...)...)
	return frame(frameNotify, flagFin, streamID, frameID, p)
}

// got is a frame the agent sent.
type got struct {
	h       header
	payload []byte
}

// readFrame reads one frame from c, within a second.
func readFrame(t *testing.T, c net.Conn) got {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	f := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, f); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	h, off, err := readHeader(f)
	if err != nil {
		t.Fatalf("frame header: %v", err)
	}
	return got{h, f[off:]}
}

// kvs decodes a KV-LIST payload.
func kvs(t *testing.T, p []byte) map[string]value {
	t.Helper()
	m := map[string]value{}
	if err := readKV(p, func(n []byte, v value) { m[string(n)] = v }); err != nil {
		t.Fatalf("kv-list: %v", err)
	}
	return m
}

// vars decodes an ACK's set-var actions into name: value, ints as
// decimal text.
func vars(t *testing.T, p []byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	for len(p) > 0 {
		if len(p) < 3 || p[0] != actionSetVar || p[1] != 3 || p[2] != scopeTxn {
			t.Fatalf("not a set-var of txn: % x", p)
		}
		name, k, err := readBytes(p[3:])
		if err != nil {
			t.Fatal(err)
		}
		v, n, err := readValue(p[3+k:])
		if err != nil {
			t.Fatal(err)
		}
		switch v.typ {
		case typeString:
			m[string(name)] = string(v.bytes)
		case typeInt32:
			m[string(name)] = itoa(v.num)
		default:
			t.Fatalf("variable %s of type %d", name, v.typ)
		}
		p = p[3+k+n:]
	}
	return m
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// wantDisconnect reads an AGENT-DISCONNECT with status, then the close.
func wantDisconnect(t *testing.T, c net.Conn, status int) {
	t.Helper()
	f := readFrame(t, c)
	if f.h.typ != frameAgentDisconnect {
		t.Fatalf("frame type %d, want AGENT-DISCONNECT", f.h.typ)
	}
	m := kvs(t, f.payload)
	if got := m["status-code"]; got.typ != typeUint32 || got.num != uint64(status) {
		t.Fatalf("status-code %+v, want %d (%s)", got, status, statusMessages[status])
	}
	if string(m["message"].bytes) != statusMessages[status] {
		t.Errorf("message %q, want %q", m["message"].bytes, statusMessages[status])
	}
	wantClosed(t, c)
}

// wantClosed waits for the agent to close c.
func wantClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [64]byte
	if n, err := c.Read(b[:]); err == nil {
		t.Fatalf("read %d more bytes, want the connection closed", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open")
	}
}

// start serves a Server with cfg over a fresh table (burst 3, rate 0.5)
// at a fixed instant, on a loopback port; it is closed with the test.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	table, err := bucket.New(bucket.Config{Default: bucket.Policy{Name: "default", Rate: 0.5, Burst: 3}, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	return startWith(t, table, cfg)
}

var t0 = time.Unix(1_700_000_000, 0)

func startWith(t *testing.T, d decide.Decider, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return t0 }
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, d, cfg, l), l.Addr().String()
}

// startMem is start on an in-memory listener, which the test dials: inside
// synctest.Test, the agent's timeouts are the bubble's fake time.
func startMem(t *testing.T, cfg Config) (*Server, *testkit.Listener) {
	t.Helper()
	table, err := bucket.New(bucket.Config{Default: bucket.Policy{Name: "default", Rate: 0.5, Burst: 3}, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return t0 }
	}
	l := testkit.NewListener()
	return serveOn(t, table, cfg, l), l
}

// serveOn serves a Server for d with cfg on l until the test ends.
func serveOn(t *testing.T, d decide.Decider, cfg Config, l net.Listener) *Server {
	t.Helper()
	s := New(d, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// dial connects to addr; the connection is closed with the test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// handshake connects and completes the HELLO.
func handshake(t *testing.T, addr string) net.Conn {
	t.Helper()
	return hello(t, dial(t, addr))
}

// dialMem connects to l, an in-memory listener; the connection is closed
// with the test.
func dialMem(t *testing.T, l *testkit.Listener) *testkit.Conn {
	t.Helper()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hello completes the HELLO on c.
func hello(t *testing.T, c net.Conn) net.Conn {
	t.Helper()
	send(t, c, helloFrame())
	if f := readFrame(t, c); f.h.typ != frameAgentHello {
		t.Fatalf("frame type %d, want AGENT-HELLO", f.h.typ)
	}
	return c
}

func send(t *testing.T, c net.Conn, b ...[]byte) {
	t.Helper()
	var all []byte
	for _, x := range b {
		all = append(all, x...)
	}
	if _, err := c.Write(all); err != nil {
		t.Fatal(err)
	}
}

// recorder is a decide.Decider that serves everything and keeps the tags and
// costs it was asked.
type recorder struct {
	mu    sync.Mutex
	tags  []string
	costs []int
}

func (r *recorder) AllowN(_ time.Time, tag []byte, n int) bucket.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tags = append(r.tags, string(tag))
	r.costs = append(r.costs, n)
	return bucket.Verdict{Allowed: true}
}
