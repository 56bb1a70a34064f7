package protocol

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// TestShutdown checks that Shutdown lets a connection answer every line it
// has already read, that Serve returns nil, and that dials then fail.
func TestShutdown(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			d := &blockDecider{entered: make(chan struct{}), release: make(chan struct{})}
			ts := NewServer(d, Config{})
			l := listen(t, network)
			served := make(chan error, 1)
			go func() { served <- ts.Serve(l) }()

			c := dial(t, l.Addr())
			// One write: the server reads all four lines together and is
			// deciding the second when Shutdown starts.
			if _, err := c.Write(lines("x", "block", "y", "")); err != nil {
				t.Fatal(err)
			}
			<-d.entered
			shut := make(chan error, 1)
			go func() { shut <- shutdown(t, ts) }()
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("Serve returned %v, want nil", err)
				}
			case <-shut:
				t.Fatal("Shutdown returned while a connection was still answering")
			}
			if nc, err := net.Dial(l.Addr().Network(), l.Addr().String()); err == nil {
				nc.Close()
				t.Error("dial after Shutdown began succeeded")
			}
			close(d.release)
			if err := <-shut; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if got, want := string(readAll(t, c)), "OK\nOK\nOK\nOK\n"; got != want {
				t.Errorf("replies %q, want %q then end of file", got, want)
			}
			if err := ts.Close(); err != nil {
				t.Errorf("Close after Shutdown: %v", err)
			}
			if err := ts.Serve(listen(t, network)); err != nil {
				t.Errorf("Serve after Shutdown returned %v, want nil", err)
			}
		})
	}
}

// TestCloseClientNotReading, on fake time: Close returns although a
// client floods requests without reading a reply, so that the server's
// Write blocks on 4 KiB buffers: exactly Close's grace of 100 ms after it
// began, the connection cut off.
func TestCloseClientNotReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := NewServer(newCountDecider(), Config{})
		ml := testkit.NewListener()
		l := &writeTracker{Listener: ml}
		served := make(chan error, 1)
		go func() { served <- ts.Serve(l) }()

		c := dialMem(t, ml)
		c.SetReadBuffer(4096)
		flood := bytes.Repeat([]byte("flood\n"), 1<<20) // 6 MiB in, 3 MiB of replies
		wrote := writeAsync(c, flood)
		synctest.Wait()
		if l.writing.Load() == 0 {
			t.Fatal("the server does not block writing replies")
		}
		closing := time.Now()
		if err := ts.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if took := time.Since(closing); took != 100*time.Millisecond {
			t.Errorf("Close returned after %v, want its grace (100ms)", took)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
		if n := ts.Stats().Active; n != 0 {
			t.Errorf("%d connections active after Close", n)
		}
		c.Close()
		<-wrote
	})
}

// writeTracker is a listener whose connections have small send buffers
// (4 KiB) and count the Writes in progress.
type writeTracker struct {
	net.Listener
	writing atomic.Int32
}

func (l *writeTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := c.(interface{ SetWriteBuffer(int) error }).SetWriteBuffer(4096); err != nil {
		c.Close()
		return nil, err
	}
	return &trackedConn{Conn: c, writing: &l.writing}, nil
}

type trackedConn struct {
	net.Conn
	writing *atomic.Int32
}

func (c *trackedConn) Write(b []byte) (int, error) {
	c.writing.Add(1)
	defer c.writing.Add(-1)
	return c.Conn.Write(b)
}

// TestUnixAndTCP serves one Server on both kinds of listener, and checks
// Close and Shutdown may be called repeatedly and concurrently.
func TestUnixAndTCP(t *testing.T) {
	ts := startServer(t, newCountDecider(), Config{}, "unix", "tcp")
	u, p := dial(t, ts.addr(0)), dial(t, ts.addr(1))
	if got := query(t, u, "a"); got != replyOK {
		t.Errorf("unix: %q, want OK", got)
	}
	// The Allower's state is shared: the second query of "a" is NO, the
	// third OK.
	if got := query(t, p, "a"); got != replyNO {
		t.Errorf("tcp: %q, want NO", got)
	}
	if got := query(t, u, "a"); got != replyOK {
		t.Errorf("unix: %q, want OK", got)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { ts.Close() })
		wg.Go(func() { shutdown(t, ts.Server) })
	}
	wg.Wait()
	ts.waitServed(t)
	for _, c := range []net.Conn{u, p} {
		if got := readAll(t, c); len(got) != 0 {
			t.Errorf("%s: read %q after Close, want end of file", c.LocalAddr().Network(), got)
		}
	}
	if s := ts.Stats(); s.Active != 0 || s.Accepted != 2 {
		t.Errorf("Stats() = %+v, want 0 active, 2 accepted", s)
	}
}
