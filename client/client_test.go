package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// long is a timeout no healthy query on this machine reaches, for the
// tests that expect answers.
const long = 5 * time.Second

// TestAnswersInOrder pipelines many concurrent queries onto two
// connections: every query gets its own tag's answer.
func TestAnswersInOrder(t *testing.T) {
	f := startFake(t, sockPath(t), answer)
	c := newTestClient(t, f.path, Config{Timeout: long, Conns: 2}, nil)
	const goroutines, each = 16, 300
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tag := fmt.Sprintf("x%d-%d", g, i)
				if i%3 == 0 {
					tag = "no" + tag
				}
				ok, err := c.Allow(context.Background(), tag)
				if err != nil || ok == strings.HasPrefix(tag, "no") {
					errs <- fmt.Errorf("%s: got %v, %v", tag, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := c.Stats()
	if s.OK+s.NO != goroutines*each || s.NO != goroutines*each/3 {
		t.Errorf("stats %+v: want %d answers, %d NO", s, goroutines*each, goroutines*each/3)
	}
	if s.Dials != 2 || f.accepts.Load() != 2 {
		t.Errorf("%d dials, %d accepted: want the 2 pooled connections", s.Dials, f.accepts.Load())
	}
}

// TestAbsentDaemon: no daemon at all. The first query dials and fails
// open; during the backoff nothing is dialed; each failed probe doubles the
// backoff; a daemon that appears is used after the backoff ends.
func TestAbsentDaemon(t *testing.T) {
	path := sockPath(t)
	clk := newClock()
	c := newTestClient(t, path, Config{Timeout: long}, clk)
	ctx := context.Background()
	ok, err := c.Allow(ctx, "a")
	if !ok || err == nil || errors.Is(err, ErrBackoff) {
		t.Fatalf("first query: got %v, %v; want true and a dial error", ok, err)
	}
	if !strings.Contains(err.Error(), "dialing unix") {
		t.Errorf("error %q does not say what failed", err)
	}
	for range 100 {
		if ok, err := c.Allow(ctx, "a"); !ok || !errors.Is(err, ErrBackoff) {
			t.Fatalf("during backoff: got %v, %v; want true, ErrBackoff", ok, err)
		}
	}
	if s := c.Stats(); s.Dials != 1 || s.Errors != 1 || s.BackedOff != 100 || s.FailOpen != 101 {
		t.Fatalf("after the backoff: %+v", s)
	}
	// Backoff 10ms, 20ms, 40ms: one dial each time it ends, none before.
	for i, pause := range []time.Duration{10, 20, 40} {
		clk.Add(pause*time.Millisecond - time.Nanosecond)
		if _, err := c.Allow(ctx, "a"); !errors.Is(err, ErrBackoff) {
			t.Fatalf("probe %d: 1ns before the backoff ends: %v", i, err)
		}
		clk.Add(time.Nanosecond)
		if _, err := c.Allow(ctx, "a"); err == nil || errors.Is(err, ErrBackoff) {
			t.Fatalf("probe %d: got %v, want a dial error", i, err)
		}
		if d := c.Stats().Dials; d != uint64(i+2) {
			t.Fatalf("probe %d: %d dials, want %d", i, d, i+2)
		}
	}
	startFake(t, path, answer)
	if _, err := c.Allow(ctx, "a"); !errors.Is(err, ErrBackoff) {
		t.Fatalf("daemon back, still backing off: %v", err)
	}
	clk.Add(80 * time.Millisecond)
	for i := range 3 {
		if ok, err := c.Allow(ctx, "no"); ok || err != nil {
			t.Fatalf("daemon back, query %d: got %v, %v; want false, nil", i, ok, err)
		}
	}
}

func TestAbsentDaemonFailClosed(t *testing.T) {
	c := newTestClient(t, sockPath(t), Config{FailMode: FailClosed}, nil)
	for i := range 3 {
		if ok, err := c.Allow(context.Background(), "a"); ok || err == nil {
			t.Fatalf("query %d: got %v, %v; want false and an error", i, ok, err)
		}
	}
	if s := c.Stats(); s.FailClosed != 3 || s.FailOpen != 0 {
		t.Fatalf("stats %+v: want 3 fail-closed decisions", s)
	}
}

// TestHungDaemon, on fake time: the daemon accepts and reads but never
// answers. Queries time out exactly Timeout after they were sent and
// fail open; those queued behind the first fail with it, as one failure;
// the connection is discarded and redialed after the backoff.
func TestHungDaemon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		read := make(chan string, 100)
		f := startFakeMem(t, func(c net.Conn, r *bufio.Reader) {
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				read <- line
			}
		})
		clk := newClock()
		const timeout = time.Second
		c := memClient(t, f, Config{Timeout: timeout}, clk)
		const n = 10
		results := make(chan error, n)
		start := time.Now()
		for range n {
			go func() {
				ok, err := c.Allow(context.Background(), "a")
				if !ok {
					err = fmt.Errorf("refused: %v", err)
				}
				results <- err
			}()
		}
		for i := range n {
			testkit.Recv(t, read, 10*time.Second, fmt.Sprintf("query %d at the daemon", i))
		}
		for range n {
			if err := testkit.Recv(t, results, 10*time.Second, "answer"); !errors.Is(err, ErrTimeout) {
				t.Errorf("got %v, want fail open with ErrTimeout", err)
			}
		}
		if elapsed := time.Since(start); elapsed != timeout {
			t.Errorf("answered after %v, want the %v timeout", elapsed, timeout)
		}
		if s := c.Stats(); s.Timeouts != n || s.FailOpen != n || s.Dials != 1 {
			t.Fatalf("stats %+v: want %d timeouts and fail-open decisions, 1 dial", s, n)
		}
		c.health.mu.Lock()
		failures := c.health.failures
		c.health.mu.Unlock()
		if failures != 1 {
			t.Fatalf("%d failures counted for one silent connection, want 1", failures)
		}
		if _, err := c.Allow(context.Background(), "a"); !errors.Is(err, ErrBackoff) {
			t.Fatalf("after the timeout: %v, want ErrBackoff", err)
		}
		clk.Add(DefaultMinBackoff)
		if _, err := c.Allow(context.Background(), "a"); !errors.Is(err, ErrTimeout) {
			t.Fatalf("probe: %v, want ErrTimeout", err)
		}
		if d, a := c.Stats().Dials, f.accepts.Load(); d != 2 || a != 2 {
			t.Fatalf("%d dials, %d accepted: the timed-out connection was not replaced", d, a)
		}
	})
}

// TestProbeAlone: when a backoff ends, one query probes; the others keep
// failing fast while it waits.
func TestProbeAlone(t *testing.T) {
	path := sockPath(t)
	clk := newClock()
	c := newTestClient(t, path, Config{Timeout: long}, clk)
	c.Allow(context.Background(), "a") // no daemon: backoff
	g := newGated()
	startFake(t, path, g.serve)
	clk.Add(DefaultMinBackoff)
	done := make(chan error, 1)
	go func() {
		_, err := c.Allow(context.Background(), "probe")
		done <- err
	}()
	if got := testkit.Recv(t, g.got, 10*time.Second, "probe"); got != "probe" {
		t.Fatalf("daemon read %q", got)
	}
	for range 10 {
		if _, err := c.Allow(context.Background(), "other"); !errors.Is(err, ErrBackoff) {
			t.Fatalf("while the probe waits: %v, want ErrBackoff", err)
		}
	}
	g.release <- struct{}{}
	if err := testkit.Recv(t, done, 10*time.Second, "probe answer"); err != nil {
		t.Fatalf("probe: %v", err)
	}
	go func() {
		_, err := c.Allow(context.Background(), "after")
		done <- err
	}()
	testkit.Recv(t, g.got, 10*time.Second, "query after the probe")
	g.release <- struct{}{}
	if err := testkit.Recv(t, done, 10*time.Second, "answer after the probe"); err != nil {
		t.Fatalf("after the probe: %v", err)
	}
}

// TestLateReplyDiscarded, on fake time: a reply that comes after its query timed out
// must never reach the next query. The timed-out connection is closed, so
// the late reply cannot even be written; the next query gets its own
// answer on a new connection.
func TestLateReplyDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated()
		f := startFakeMem(t, g.serve)
		clk := newClock()
		c := memClient(t, f, Config{Timeout: 50 * time.Millisecond, Conns: 1}, clk)
		ok, err := c.Allow(context.Background(), "no-late")
		if !ok || !errors.Is(err, ErrTimeout) {
			t.Fatalf("slow reply: got %v, %v; want true, ErrTimeout", ok, err)
		}
		testkit.Recv(t, g.got, 10*time.Second, "first query")
		g.release <- struct{}{}
		if err := testkit.Recv(t, g.wrote, 10*time.Second, "late write"); err == nil {
			t.Fatal("the late reply was written to a connection the client should have closed")
		}
		clk.Add(DefaultMinBackoff)
		c.timeout = long
		c.health.hold = long
		done := make(chan reply, 1)
		go func() {
			ok, err := c.Allow(context.Background(), "next")
			done <- reply{ok, err}
		}()
		if got := testkit.Recv(t, g.got, 10*time.Second, "next query"); got != "next" {
			t.Fatalf("daemon read %q, want next", got)
		}
		g.release <- struct{}{}
		if r := testkit.Recv(t, done, 10*time.Second, "next answer"); !r.ok || r.err != nil {
			t.Fatalf("next query: got %v, %v; want its own OK", r.ok, r.err)
		}
		if d := c.Stats().Dials; d != 2 {
			t.Fatalf("%d dials, want 2", d)
		}
	})
}

// TestCanceledKeepsStep: a query whose context ends keeps its place; its
// reply is read and dropped, and the next query on the same connection
// gets its own answer.
func TestCanceledKeepsStep(t *testing.T) {
	g := newGated()
	f := startFake(t, sockPath(t), g.serve)
	c := newTestClient(t, f.path, Config{Timeout: long, Conns: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan reply, 1)
	go func() {
		ok, err := c.Allow(ctx, "no-canceled")
		first <- reply{ok, err}
	}()
	testkit.Recv(t, g.got, 10*time.Second, "first query")
	cancel()
	if r := testkit.Recv(t, first, 10*time.Second, "canceled answer"); !r.ok || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled query: got %v, %v; want true, context.Canceled", r.ok, r.err)
	}
	second := make(chan reply, 1)
	go func() {
		ok, err := c.Allow(context.Background(), "second")
		second <- reply{ok, err}
	}()
	g.release <- struct{}{} // NO, for the canceled query
	if got := testkit.Recv(t, g.got, 10*time.Second, "second query"); got != "second" {
		t.Fatalf("daemon read %q", got)
	}
	g.release <- struct{}{}
	if r := testkit.Recv(t, second, 10*time.Second, "second answer"); !r.ok || r.err != nil {
		t.Fatalf("second query: got %v, %v; want OK (the canceled query's NO was given to it?)", r.ok, r.err)
	}
	if s := c.Stats(); s.Dials != 1 || s.Canceled != 1 || s.OK != 1 {
		t.Fatalf("stats %+v: want 1 dial, 1 canceled, 1 OK", s)
	}
}
