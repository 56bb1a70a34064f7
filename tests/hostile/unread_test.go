package hostile

import (
	"bytes"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/havarint"
	"github.com/dthrottle/dthrottle/tests/harness"
	dto "github.com/prometheus/client_model/go"
)

// This file measures what clients that send requests and never read the
// answers cost the HTTP decision endpoint and the SPOE agent: 1,000 of
// them with 110 requests each, whose answers the sockets' buffers take;
// then a few sending on until the daemon's writes block on the full
// sockets, and it closes them. (On loopback the daemon's send buffer
// grows to some 4 MiB: filling it takes some 16,000 answers a
// connection, too many to ask on 1,000 of them in a test.)

// unreadConfig serves one way in (%s: its section) on a port the test
// picks, with one tag under a limit so wide that every request is served
// with the RateLimit fields, as a busy tag's would be.
const unreadConfig = `
[listen]
unix = "%%SOCK%%"
[[policy]]
name = "unread"
prefix = "unread"
rate = 1e9
burst = 1000000
[admin]
http = "127.0.0.1:0"
%s
listen = "127.0.0.1:0"
`

// unreadWriteTimeout is the write timeout of both ways in: answers not
// written within it close the connection.
const unreadWriteTimeout = 5 * time.Second

// unreadWay is a way in as the test drives it.
type unreadWay struct {
	section  string             // the config section
	metric   string             // its metrics' prefix: dthrottle_<metric>_connections
	answered func(fams) float64 // requests answered so far
	greet    func(c net.Conn) error
	request  func(i int) []byte // the ith request on a connection
}

// fams is a scrape of the admin endpoint.
type fams = map[string]*dto.MetricFamily

// TestHTTPUnreadClients measures clients of the HTTP decision endpoint
// that never read (measureUnread); docs/http-endpoint.md states the
// figures.
func TestHTTPUnreadClients(t *testing.T) {
	harness.Alone(t)
	measureUnread(t, unreadWay{
		section: "[http]",
		metric:  "http",
		answered: func(f fams) float64 {
			return harness.Metric(t, f, "dthrottle_http_requests_total", "result=allowed")
		},
		greet: func(net.Conn) error { return nil },
		request: func(int) []byte {
			return []byte("GET /v1/allow?tag=unread HTTP/1.1\r\nHost: dthrottle\r\n\r\n")
		},
	})
}

// TestSPOEUnreadClients measures clients of the SPOE agent that say HELLO
// and then never read (measureUnread); docs/haproxy-spoe.md states the
// figures.
func TestSPOEUnreadClients(t *testing.T) {
	harness.Alone(t)
	measureUnread(t, unreadWay{
		section: "[spoe]",
		metric:  "spoe",
		answered: func(f fams) float64 {
			return harness.Metric(t, f, "dthrottle_spoe_messages_total", "result=allowed")
		},
		greet:   spoeHello,
		request: func(i int) []byte { return spoeNotify(uint64(i+1), "unread") },
	})
}

// measureUnread opens 1,000 connections to way, each of which sends 110
// requests and reads nothing: the daemon answers them all (the sockets
// take the answers), its memory grows by under 100 MiB, and the
// connections stay open, idle. Then 10 of them send on, and the daemon
// closes them all within the write timeout (and 2 s) of its answers
// stopping, its writes blocked, its memory still under 100 MiB above
// where it began.
func measureUnread(t *testing.T, way unreadWay) {
	const first, flooding = 110, 10
	n := connsAllowed(t, 1000)
	config, addr := harness.PinPort(t, fmt.Sprintf(unreadConfig, way.section), "listen")
	d := harness.StartDaemon(t, config)
	admin := d.AdminAddr(t)
	pid := d.Cmd.Process.Pid
	rss0 := rssKiB(t, pid)

	start := time.Now()
	clients := make([]*unreadClient, n)
	for i := range clients {
		clients[i] = dialUnread(t, addr, way, first)
	}
	testkit.WaitFor(t, 30*time.Second, "the first requests to be answered", func() bool {
		return way.answered(harness.Scrape(t, admin)) >= float64(n*first)
	})
	idle := rssKiB(t, pid)
	t.Logf("%d connections x %d requests answered, unread, in %v: daemon RSS %d KiB, +%d KiB (%d B a connection)",
		n, first, time.Since(start).Round(time.Millisecond), rss0, idle-rss0, (idle-rss0)*1024/int64(n))
	awaitMetric(t, admin, "dthrottle_"+way.metric+"_connections", float64(n))

	start = time.Now()
	var wg sync.WaitGroup
	for _, c := range clients[:flooding] {
		wg.Go(func() { c.flood(way, first, start.Add(20*time.Second)) })
	}
	// The answers stop when the last connection's writes block: watch
	// the count of answers until the clients are done.
	flooded := make(chan struct{})
	go func() { wg.Wait(); close(flooded) }()
	stopped := watchCount(t, func() float64 { return way.answered(harness.Scrape(t, admin)) }, flooded)
	peak := peakRSSKiB(t, pid)
	var lived time.Duration // the longest a connection lasted after the client began sending on
	sent := 0
	for i, c := range clients[:flooding] {
		if !c.closed {
			t.Fatalf("client %d: still open 20 s after it began sending on: %v", i, c.err)
		}
		lived = max(lived, c.closedAt.Sub(start))
		sent += c.sent
	}
	after := start.Add(lived).Sub(stopped)
	awaitMetric(t, admin, "dthrottle_"+way.metric+"_connections", float64(n-flooding))
	t.Logf("%d sending on, %d requests each on average: peak RSS +%d KiB; answers stopped %v after they began, the last connection closed %v after that",
		flooding, sent/flooding, peak-rss0, stopped.Sub(start).Round(time.Millisecond), after.Round(time.Millisecond))
	if growth := peak - rss0; growth >= 100<<10 {
		t.Errorf("the daemon's memory grew by %d KiB, want under 100 MiB", growth)
	}
	if after > unreadWriteTimeout+2*time.Second {
		t.Errorf("the last connection was closed %v after the answers stopped, want within the write timeout (%v) and 2 s", after, unreadWriteTimeout)
	}
}

// watchCount reads count every 100 ms until done is closed, and returns
// when it last changed.
func watchCount(t *testing.T, count func() float64, done <-chan struct{}) time.Time {
	t.Helper()
	last, changed := count(), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return changed
		case <-tick.C:
			if n := count(); n != last {
				last, changed = n, time.Now()
			}
		}
	}
}

// unreadClient is a connection that sends requests and never reads.
type unreadClient struct {
	c        net.Conn
	sent     int
	closed   bool // the daemon closed the connection
	closedAt time.Time
	err      error
}

// dialUnread connects to addr with a small receive buffer, so that its
// unread answers soon fill it, greets, and sends n requests.
func dialUnread(t *testing.T, addr string, way unreadWay, n int) *unreadClient {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
		return err
	}}
	c, err := dialer.Dial("tcp", addr)
	harness.Must(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	harness.Must(t, way.greet(c))
	u := &unreadClient{c: c}
	var b bytes.Buffer
	for i := range n {
		b.Write(way.request(i))
	}
	_, err = c.Write(b.Bytes())
	harness.Must(t, err)
	u.sent = n
	return u
}

// flood sends requests, from the nth on, until a write fails or the
// deadline passes, and notes whether the daemon closed the connection.
func (u *unreadClient) flood(way unreadWay, n int, deadline time.Time) {
	u.c.SetWriteDeadline(deadline)
	var b bytes.Buffer
	for {
		b.Reset()
		for i := range 16 {
			b.Write(way.request(n + i))
		}
		if _, u.err = u.c.Write(b.Bytes()); u.err != nil {
			u.closedAt = time.Now()
			u.closed = !errors.Is(u.err, os.ErrDeadlineExceeded)
			return
		}
		n += 16
		u.sent = n
	}
}

// spoeHello sends HAProxy's HELLO and reads the agent's.
func spoeHello(c net.Conn) error {
	var kv []byte
	kv = spoeString(kv, "supported-versions")
	kv = spoeString(append(kv, 8), "2.0")
	kv = spoeString(kv, "max-frame-size")
	kv = havarint.Append(append(kv, 3), 16380)
	kv = spoeString(kv, "capabilities")
	kv = spoeString(append(kv, 8), "pipelining")
	if _, err := c.Write(spoeFrame(1, 0, 0, kv)); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	hello := make([]byte, binenc.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, hello); err != nil {
		return err
	}
	if hello[0] != 101 {
		return fmt.Errorf("spoe: frame type %d after the hello, want 101 (AGENT-HELLO)", hello[0])
	}
	return nil
}

// spoeNotify is a NOTIFY frame of one message with the argument tag.
func spoeNotify(frameID uint64, tag string) []byte {
	p := spoeString(nil, "dthrottle-check")
	p = append(p, 1)
	p = spoeString(p, "tag")
	p = spoeString(append(p, 8), tag)
	return spoeFrame(3, 1, frameID, p)
}

// spoeFrame is a whole SPOP frame, unfragmented.
func spoeFrame(typ byte, streamID, frameID uint64, payload []byte) []byte {
	b := []byte{0, 0, 0, 0, typ, 0, 0, 0, 1}
	b = havarint.Append(b, streamID)
	b = havarint.Append(b, frameID)
	b = append(b, payload...)
	binenc.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func spoeString(b []byte, s string) []byte { return append(havarint.Append(b, uint64(len(s))), s...) }
