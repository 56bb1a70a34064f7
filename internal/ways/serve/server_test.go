package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/logtest"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// ioTimeout bounds every client read and write in tests, so that a bug
// fails the test instead of hanging it. It is never used to synchronise.
const ioTimeout = 20 * time.Second

// listen returns a Unix listener in a temporary directory.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dial connects to l with an I/O deadline set.
func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(l.Addr().Network(), l.Addr().String(), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// echo is a handler that echoes what it reads until end of input or
// shutdown.
func echo(ctx context.Context, c net.Conn) {
	defer InterruptReads(ctx, c)()
	io.Copy(c, c)
}

// start serves l with s; Serve's result is checked when the test ends,
// after s is closed.
func start(t *testing.T, s *Server, l net.Listener) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	})
}

func TestServeAndStats(t *testing.T) {
	s := New(HandlerFunc(echo), Config{Name: "test"})
	l := listen(t)
	start(t, s, l)
	a, b := dial(t, l), dial(t, l)
	for _, c := range []net.Conn{a, b} {
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
			t.Fatalf("echo: %q, %v", got, err)
		}
	}
	if st := s.Stats(); st != (Stats{Accepted: 2, Active: 2}) {
		t.Errorf("Stats() = %+v, want 2 accepted, 2 active", st)
	}
	a.Close()
	testkit.WaitFor(t, ioTimeout, "a closed connection to free its place", func() bool { return s.Stats().Active == 1 })
}

// TestBusy holds the only place: the next connection reads the busy
// answer, then end of file, and is counted; one warning is logged.
func TestBusy(t *testing.T) {
	logs := &logtest.Recorder{}
	s := New(HandlerFunc(echo), Config{Name: "test", MaxConns: 1, Busy: []byte("busy\n"), Logger: slog.New(logs)})
	l := listen(t)
	start(t, s, l)
	held := dial(t, l)
	held.Write([]byte("x"))
	io.ReadFull(held, make([]byte, 1)) // served: it holds the place
	for range 2 {
		over := dial(t, l)
		over.Write([]byte("ignored"))
		if got, err := io.ReadAll(over); string(got) != "busy\n" || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("over the limit: read %q, %v; want the busy answer and end of file", got, err)
		}
	}
	if st := s.Stats(); st != (Stats{Accepted: 1, Rejected: 2, Active: 1}) {
		t.Errorf("Stats() = %+v, want 1 accepted, 2 rejected, 1 active", st)
	}
	var warned int
	for _, m := range logs.Messages() {
		if m == "WARN test: connection limit reached, closing new connections" {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d connection limit warnings in %q, want 1", warned, logs.Messages())
	}
}

// TestNoBusyAnswer: without a busy answer a connection over the limit is
// closed at once, unanswered.
func TestNoBusyAnswer(t *testing.T) {
	s := New(HandlerFunc(echo), Config{MaxConns: 1})
	l := listen(t)
	start(t, s, l)
	held := dial(t, l)
	held.Write([]byte("x"))
	io.ReadFull(held, make([]byte, 1))
	if got, err := io.ReadAll(dial(t, l)); len(got) != 0 || err != nil {
		t.Fatalf("over the limit: read %q, %v; want end of file", got, err)
	}
}

// stuckConn is a connection whose Write reports itself and then waits for
// release, whatever its deadline; closing it is reported too.
type stuckConn struct {
	net.Conn
	wrote, closed chan<- struct{}
	release       <-chan struct{}
	once          sync.Once
}

func (c *stuckConn) Write(b []byte) (int, error) {
	c.wrote <- struct{}{}
	<-c.release
	return 0, os.ErrDeadlineExceeded
}

func (c *stuckConn) Close() error {
	c.once.Do(func() { c.closed <- struct{}{} })
	return c.Conn.Close()
}

// TestBusyAnswersInFlight: at most maxRefusing busy answers are written
// at once; a connection over the limit past them is closed unanswered.
func TestBusyAnswersInFlight(t *testing.T) {
	const over = maxRefusing + 6
	s := New(HandlerFunc(echo), Config{MaxConns: 1, Busy: []byte("busy")})
	l := testkit.NewListener()
	start(t, s, l)
	if _, err := l.Dial(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, ioTimeout, "the first connection served", func() bool { return s.Stats().Active == 1 })

	wrote, closed := make(chan struct{}, over), make(chan struct{}, over)
	release := make(chan struct{})
	for range over {
		c, _ := testkit.Pipe()
		if err := l.Offer(&stuckConn{Conn: c, wrote: wrote, closed: closed, release: release}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, ioTimeout, "every connection over the limit answered or closed", func() bool {
		return len(wrote)+len(closed) == over
	})
	if len(wrote) != maxRefusing || len(closed) != over-maxRefusing {
		t.Errorf("%d answered and %d closed unanswered, want %d and %d", len(wrote), len(closed), maxRefusing, over-maxRefusing)
	}
	close(release)
	testkit.WaitFor(t, ioTimeout, "every answer to end", func() bool { return len(closed) == over })
	if st := s.Stats(); st.Rejected != over {
		t.Errorf("Stats() = %+v, want %d rejected", st, over)
	}
}

// TestShutdownWaits: a handler given time finishes and Shutdown returns
// nil; Serve returns nil, dials fail, and Close after it is harmless.
func TestShutdownWaits(t *testing.T) {
	finishing := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, c net.Conn) {
		<-ctx.Done()
		close(finishing)
		c.Write([]byte("bye"))
	})
	s := New(h, Config{})
	l := listen(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	c := dial(t, l)
	testkit.WaitFor(t, ioTimeout, "the connection served", func() bool { return s.Stats().Active == 1 })
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	<-finishing
	if got, _ := io.ReadAll(c); string(got) != "bye" {
		t.Errorf("read %q, want the handler's last words", got)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
	if nc, err := net.Dial("unix", l.Addr().String()); err == nil {
		nc.Close()
		t.Error("dial after Shutdown succeeded")
	}
	if st := s.Stats(); st.Active != 0 {
		t.Errorf("Stats() = %+v after Shutdown, want none active", st)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close after Shutdown: %v", err)
		}
	}
	if err := s.Serve(listen(t)); err != nil {
		t.Errorf("Serve after Shutdown returned %v, want nil", err)
	}
}

// TestShutdownCutsOff, on fake time: a handler that ignores the end of
// its context is cut off when Shutdown's context ends, exactly then: its
// read fails, and Shutdown returns the context's error once the handler
// returned.
func TestShutdownCutsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		readErr := make(chan error, 1)
		h := HandlerFunc(func(_ context.Context, c net.Conn) {
			_, err := c.Read(make([]byte, 1))
			readErr <- err
		})
		s := New(h, Config{})
		l := testkit.NewListener()
		start(t, s, l)
		if _, err := l.Dial(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := s.Stats().Active; n != 1 {
			t.Fatalf("%d connections served, want 1", n)
		}
		const grace = 10 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		stopping := time.Now()
		if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want the context's deadline", err)
		}
		if took := time.Since(stopping); took != grace {
			t.Errorf("Shutdown returned after %v, want its context's %v", took, grace)
		}
		select {
		case err := <-readErr:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the handler's read: %v, want a deadline error", err)
			}
		default:
			t.Error("Shutdown returned before the handler")
		}
	})
}

// TestCloseQuiet: Close may be called twice and concurrently, and a
// listener closed by shutdown is normal: nothing is logged.
func TestCloseQuiet(t *testing.T) {
	logs := &logtest.Recorder{}
	s := New(HandlerFunc(echo), Config{Logger: slog.New(logs)})
	ls := []net.Listener{listen(t), listen(t)}
	served := make(chan error, len(ls))
	for _, l := range ls {
		go func() { served <- s.Serve(l) }()
	}
	c := dial(t, ls[0])
	testkit.WaitFor(t, ioTimeout, "the connection served", func() bool { return s.Stats().Active == 1 })
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	for range ls {
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	}
	if got, err := io.ReadAll(c); len(got) != 0 || err != nil {
		t.Errorf("after Close: read %q, %v; want end of file", got, err)
	}
	if m := logs.Messages(); len(m) != 0 {
		t.Errorf("logged %q, want nothing", m)
	}
}

// flakyListener returns the queued errors from Accept, then the real
// listener's connections.
type flakyListener struct {
	net.Listener
	errs chan error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	select {
	case err := <-l.errs:
		return nil, err
	default:
	}
	return l.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", errno)}
}

// TestAcceptBackoff, on fake time: temporary accept errors are logged
// with pauses that double, 5, 10 and 20 ms, and serving goes on: the
// connection waiting is served exactly 35 ms on; a lasting error ends
// Serve, naming the server.
func TestAcceptBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logtest.Recorder{}
		s := New(HandlerFunc(echo), Config{Name: "test", Logger: slog.New(logs)})
		ml := testkit.NewListener()
		l := &flakyListener{Listener: ml, errs: make(chan error, 4)}
		for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ETIMEDOUT, syscall.ECONNABORTED} {
			l.errs <- acceptErr(errno)
		}
		start(t, s, l)
		began := time.Now()
		c, err := ml.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("x"))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("after accept errors: %v", err)
		}
		if took := time.Since(began); took != 35*time.Millisecond {
			t.Errorf("served after %v, want the three pauses' 35ms", took)
		}
		var delays []time.Duration
		for _, r := range logs.Records() {
			if r.Message == "test: accept failed, retrying" {
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "delay" {
						delays = append(delays, a.Value.Duration())
					}
					return true
				})
			}
		}
		want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
		if len(delays) != len(want) {
			t.Fatalf("delays %v, want %v", delays, want)
		}
		for i := range want {
			if delays[i] != want[i] {
				t.Errorf("step %d: got %v, want %v", i, delays[i], want[i])
			}
		}

		fatal := &flakyListener{Listener: testkit.NewListener(), errs: make(chan error, 1)}
		fatal.errs <- acceptErr(syscall.EINVAL)
		if err := s.Serve(fatal); !errors.Is(err, syscall.EINVAL) || err.Error()[:5] != "test:" {
			t.Errorf("Serve on a failing listener: %v, want EINVAL named test:", err)
		}
	})
}

func TestIsTemporary(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{acceptErr(syscall.EMFILE), true},
		{acceptErr(syscall.ENFILE), true},
		{acceptErr(syscall.ENOBUFS), true},
		{acceptErr(syscall.ENOMEM), true},
		{acceptErr(syscall.ECONNABORTED), true},
		{acceptErr(syscall.ECONNRESET), true},
		{acceptErr(syscall.EINTR), true},
		{acceptErr(syscall.EAGAIN), true},
		{acceptErr(syscall.EPROTO), true},
		{acceptErr(syscall.EPERM), true},
		{acceptErr(syscall.ETIMEDOUT), true},
		{os.ErrDeadlineExceeded, true},
		{acceptErr(syscall.EINVAL), false},
		{acceptErr(syscall.EBADF), false},
		{net.ErrClosed, false},
		{errors.New("other"), false},
	} {
		if got := isTemporary(tc.err); got != tc.want {
			t.Errorf("isTemporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestNextBackoff(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	var d time.Duration
	for i, w := range want {
		d = nextBackoff(d)
		if d != w*time.Millisecond {
			t.Errorf("step %d: got %v, want %v", i, d, w*time.Millisecond)
		}
	}
}

func TestEverySecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration // since t0
		want bool
	}{
		{0, true},
		{10 * time.Millisecond, false},
		{999 * time.Millisecond, false},
		{time.Second, true},
		{1500 * time.Millisecond, false},
		{500 * time.Millisecond, true}, // the clock stepped back
		{600 * time.Millisecond, false},
		{5 * time.Second, true},
	}
	var e everySecond
	for i, st := range steps {
		if got := e.allow(t0.Add(st.at)); got != st.want {
			t.Errorf("step %d: got %v, want %v", i, got, st.want)
		}
	}
}
