package hapeers

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// newClock is a clock for the tests' servers, moved by hand.
func newClock() *testkit.Clock { return testkit.NewClock(time.Unix(1_800_000_000, 0)) }

// newTestServer serves a Server over a table of burst 5, rate 1/s, on an
// in-memory listener, following table "web" by gpc0; the table's clock
// is moved by hand. Inside synctest.Test, the session's heartbeats, acks,
// check rounds and timeouts are the bubble's fake time.
func newTestServer(t *testing.T, cfg Config) (*Server, *bucket.Table, *testkit.Clock, *testkit.Listener) {
	t.Helper()
	table, err := bucket.New(bucket.Config{Default: bucket.Policy{Name: "default", Rate: 1, Burst: 5}, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	if cfg.Tables == nil {
		cfg.Tables = []string{"web"}
	}
	cfg.Clock = clk.Now
	s := New(table, cfg)
	l := testkit.NewListener()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, table, clk, l
}

// haproxy is a fake HAProxy process: it connects, says hello, and sends
// and reads messages as HAProxy 2.6 does.
type haproxy struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

// dial connects to l and says hello as name with pid; it returns the
// status line answered.
func dial(t *testing.T, l *testkit.Listener, proto, to, name string, pid int) (*haproxy, string) {
	t.Helper()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	return hello(t, c, proto, to, name, pid)
}

// hello says hello on c as name with pid, and returns the status line
// answered; c is closed when the test ends.
func hello(t *testing.T, c net.Conn, proto, to, name string, pid int) (*haproxy, string) {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	h := &haproxy{t: t, c: c, r: bufio.NewReader(c)}
	h.send([]byte(proto + "\n" + to + "\n" + name + " " + itoa(pid) + " 1\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := h.r.ReadString('\n')
	if err != nil {
		return h, "closed: " + err.Error()
	}
	return h, strings.TrimSuffix(line, "\n")
}

// connect dials as HAProxy "lb" with pid and expects 200.
func connect(t *testing.T, l *testkit.Listener, pid int) *haproxy {
	t.Helper()
	h, st := dial(t, l, "HAProxyS 2.1", "dthrottled", "lb", pid)
	if st != "200" {
		t.Fatalf("hello answered %q, want 200", st)
	}
	return h
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

func (h *haproxy) send(b []byte) {
	h.t.Helper()
	h.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := h.c.Write(b); err != nil {
		h.t.Fatalf("writing to dthrottled: %v", err)
	}
}

// next reads the next message, failing the test after 5 s.
func (h *haproxy) next() Message {
	h.t.Helper()
	for {
		if m, n, err := Decode(h.buf); err != nil {
			h.t.Fatalf("dthrottled sent a bad message: %v", err)
		} else if n > 0 {
			m.Data = append([]byte(nil), m.Data...)
			h.buf = h.buf[n:]
			return m
		}
		h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [4096]byte
		n, err := h.r.Read(b[:])
		if err != nil {
			h.t.Fatalf("reading from dthrottled: %v", err)
		}
		h.buf = append(h.buf, b[:n]...)
	}
}

// await reads messages until one for which ok is true, skipping
// heartbeats and acks unless ok wants them.
func (h *haproxy) await(what string, ok func(Message) bool) Message {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if m := h.next(); ok(m) {
			return m
		}
	}
	h.t.Fatalf("no %s within 5s", what)
	return Message{}
}

// stringTable is HAProxy's definition of "web": string keys of 32 bytes,
// gpt0 and gpc0, entries kept 60 s.
var stringTable = Definition{ID: 7, Name: "/web", KeyType: KeyString, KeyLen: 32, Data: 1<<dtGPT0 | 1<<dtGPC0, Expire: 60000}

// define sends d with its expire, as HAProxy 2.6 does.
func (h *haproxy) define(d Definition) {
	data := appendVarint(nil, d.ID)
	data = appendVarint(data, uint64(len(d.Name)))
	data = append(data, d.Name...)
	data = appendVarint(data, d.KeyType)
	data = appendVarint(data, d.KeyLen)
	data = appendVarint(data, d.Data)
	data = appendVarint(data, d.Expire)
	h.send(appendMessage(nil, msgDefine, data))
}

// update sends key of stringTable with gpt0 0 and gpc0 count.
func (h *haproxy) update(id uint32, key string, count uint64) {
	h.send(AppendUpdate(nil, &stringTable, id, []byte(key), []uint64{0, count}))
}

// flagOfUpdate decodes an update dthrottled pushed: its key and gpt0.
func flagOfUpdate(t *testing.T, m Message) (string, uint64) {
	t.Helper()
	d := Definition{KeyType: KeyString, KeyLen: 32, Data: 1 << dtGPT0}
	u, err := DecodeUpdate(m.Type, m.Data, &d)
	if err != nil {
		t.Fatalf("dthrottled's update: %v", err)
	}
	return string(u.Key), u.Values[dtGPT0]
}
