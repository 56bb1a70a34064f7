package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file holds the bad-input daemon's connections at their limits: more
// than max_conns at once, and one that never reads when the daemon stops.

// TestBadInputMaxConns holds max_conns connections open: one more is
// accepted and closed at once, without a reply, and counted; the ones held
// are still served; once one closes, a new connection is served again.
func TestBadInputMaxConns(t *testing.T) {
	const maxConns = 8
	d, admin, eps := startBadInput(t, maxConns)
	awaitMetric(t, admin, "dthrottle_connections", 0) // the harness's probe is gone
	held := make([]net.Conn, maxConns)
	for i := range held {
		held[i] = dialE(t, eps[i%2])
		defer held[i].Close()
		if got := askOn(t, held[i], fmt.Sprintf("held-%d", i)); got != "OK\n" {
			t.Fatalf("held connection %d: %q", i, got)
		}
	}
	for _, e := range eps {
		c := dialE(t, e)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 16))
		c.Close()
		if n != 0 || err != io.EOF {
			t.Fatalf("%s connection over max_conns: read %d bytes, %v; want end of file at once", e.network, n, err)
		}
	}
	if got := harness.Metric(t, harness.Scrape(t, admin), "dthrottle_connections_rejected_total"); got != 2 {
		t.Fatalf("connections_rejected_total = %v, want 2", got)
	}
	d.AwaitLog(t, "connection limit reached")
	for i, c := range held {
		if got := askOn(t, c, fmt.Sprintf("held-%d", i)); got != "OK\n" {
			t.Fatalf("held connection %d after the rejections: %q", i, got)
		}
	}
	held[0].Close()
	awaitMetric(t, admin, "dthrottle_connections", maxConns-1)
	c := dialE(t, eps[1])
	defer c.Close()
	if got := askOn(t, c, "held-0"); got != "OK\n" {
		t.Fatalf("new connection once one closed: %q", got)
	}
	for _, c := range append(held, c) {
		c.Close()
	}
	awaitMetric(t, admin, "dthrottle_connections", 0)
	probeFresh(t, eps)
}

// TestStopWithStuckClient: SIGTERM while a client sends without reading
// cuts that client off after the grace, warns, and still exits 0, so
// systemd does not mark the unit failed.
func TestStopWithStuckClient(t *testing.T) {
	d, _, eps := startBadInput(t, 100)
	c := dialE(t, eps[0])
	defer c.Close()
	chunk := bytes.Repeat([]byte("s\n"), 32<<10)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("writes never blocked")
		}
		c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		if n, err := c.Write(chunk); err != nil && n == 0 {
			break
		}
	}
	d.Stop(t) // fails the test unless the exit is clean
	d.AwaitLog(t, "connections not reading their replies were cut off")
}
