package serve

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// minAcceptDelay and maxAcceptDelay bound the pause after a temporary
// accept error; the pause doubles with each consecutive error.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// nextBackoff returns the pause after a temporary accept error, given the
// previous pause (0 if the last accept succeeded).
func nextBackoff(prev time.Duration) time.Duration {
	if prev <= 0 {
		return minAcceptDelay
	}
	return min(2*prev, maxAcceptDelay)
}

// isTemporary reports whether an accept error may go away by itself, so
// that accepting should be retried after a pause: running out of file
// descriptors or memory, a connection aborted or reset before it was
// accepted, an interrupted call, a timeout.
func isTemporary(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR,
			syscall.EAGAIN, syscall.EPROTO, syscall.EPERM, syscall.ETIMEDOUT:
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// everySecond lets an event through at most once a second. The zero value
// lets the first event through. It is safe for concurrent use.
type everySecond struct {
	last atomic.Int64 // unix nanoseconds of the last event let through
}

// allow reports whether an event at now may pass.
func (e *everySecond) allow(now time.Time) bool {
	t := now.UnixNano()
	last := e.last.Load()
	// A clock stepped back lets the event through rather than muting it.
	if last != 0 && t >= last && t-last < int64(time.Second) {
		return false
	}
	return e.last.CompareAndSwap(last, t)
}
