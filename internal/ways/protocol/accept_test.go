package protocol

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/logtest"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// flakyListener returns the errors queued in errs from Accept before
// accepting from the real listener; once forever is set, it returns that
// error from every Accept until closed.
type flakyListener struct {
	net.Listener
	errs    chan error
	forever error
	calls   atomic.Int64

	mu     sync.Mutex
	closed bool
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", errno)}
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	select {
	case err := <-l.errs:
		return nil, err
	default:
	}
	if l.forever != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return nil, net.ErrClosed
		}
		return nil, l.forever
	}
	return l.Listener.Accept()
}

func (l *flakyListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

// TestAcceptTemporaryErrors, on fake time: temporary accept errors are
// logged and retried after pauses of 5, 10 and 20 ms, and serving then
// goes on: the connection waiting is served exactly 35 ms on.
func TestAcceptTemporaryErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logtest.Recorder{}
		s := NewServer(&recordDecider{}, Config{Logger: slog.New(logs)})
		ml := testkit.NewListener()
		l := &flakyListener{Listener: ml, errs: make(chan error, 3)}
		for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED} {
			l.errs <- acceptErr(errno)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(l) }()

		start := time.Now()
		c := dialMem(t, ml)
		if got := query(t, c, "aa"); got != replyOK {
			t.Fatalf("query after accept errors: %q, want OK", got)
		}
		if took := time.Since(start); took != 35*time.Millisecond {
			t.Errorf("served after %v, want the three pauses' 35ms", took)
		}
		recs := logs.Find(slog.LevelWarn, "protocol: accept failed, retrying")
		if len(recs) != 3 {
			t.Fatalf("%d accept warnings, want 3", len(recs))
		}
		for i, want := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
			var got time.Duration
			recs[i].Attrs(func(a slog.Attr) bool {
				if a.Key == "delay" {
					got = a.Value.Duration()
				}
				return true
			})
			if got != want {
				t.Errorf("warning %d: delay %v, want %v", i, got, want)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	})
}

// TestAcceptCloseDuringPause, on fake time: Close interrupts the pause
// after an accept error at once, however long the pause.
func TestAcceptCloseDuringPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(&recordDecider{}, Config{})
		l := &flakyListener{Listener: testkit.NewListener(), forever: acceptErr(syscall.EMFILE)}
		served := make(chan error, 1)
		go func() { served <- s.Serve(l) }()
		time.Sleep(time.Minute) // the pause has grown to its 1s
		synctest.Wait()
		closing := time.Now()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
		if took := time.Since(closing); took != 0 {
			t.Errorf("Serve returned %v after Close, want at once", took)
		}
		if n := l.calls.Load(); n < 60 {
			t.Errorf("%d accepts in a minute of errors, want one a second at least", n)
		}
	})
}

// TestAcceptFatalError checks that Serve returns a lasting accept error,
// closing its listener, and that the server keeps serving other listeners.
func TestAcceptFatalError(t *testing.T) {
	ts := startServer(t, &recordDecider{}, Config{}, "unix")
	l := &flakyListener{Listener: listen(t, "unix"), errs: make(chan error, 1)}
	l.errs <- acceptErr(syscall.EINVAL)
	err := ts.Serve(l)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Serve returned %v, want EINVAL", err)
	}
	if _, err := net.Dial("unix", l.Addr().String()); err == nil {
		t.Errorf("dial succeeded after Serve returned: listener left open")
	}
	if got := query(t, dial(t, ts.addr(0)), "aa"); got != replyOK {
		t.Errorf("other listener: %q, want OK", got)
	}
}
