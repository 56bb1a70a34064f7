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

// TestAcceptTemporaryErrors checks that temporary accept errors are logged
// and retried after growing pauses, and that serving then goes on.
func TestAcceptTemporaryErrors(t *testing.T) {
	logs := &logtest.Recorder{}
	s := NewServer(&recordDecider{}, Config{Logger: slog.New(logs)})
	l := &flakyListener{Listener: listen(t, "unix"), errs: make(chan error, 3)}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED} {
		l.errs <- acceptErr(errno)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()

	c := dial(t, l.Addr())
	if got := query(t, c, "aa"); got != replyOK {
		t.Fatalf("query after accept errors: %q, want OK", got)
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
}

// TestAcceptCloseDuringPause checks that Close interrupts the pause after
// an accept error.
func TestAcceptCloseDuringPause(t *testing.T) {
	s := NewServer(&recordDecider{}, Config{})
	l := &flakyListener{Listener: listen(t, "unix"), forever: acceptErr(syscall.EMFILE)}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	testkit.WaitFor(t, ioTimeout, "several accept errors", func() bool { return l.calls.Load() >= 4 })
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
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
