package hapeers

import (
	"io"
	"net"
	"syscall"
)

// This file owns how a connection's updates are read: in batches, without
// the kernel waking the process for each of HAProxy's sends.
//
// HAProxy sends an entry's update at each pass of its event loop, a few
// thousand small sends a second under load, while the reader sleeps
// between reads (readEvery). Each send made the runtime's poller wake to
// find no one waiting: 13% of a core at 100k requests a second, where the
// reads themselves took 2%. The socket's low-water mark (SO_RCVLOWAT)
// stops that: while data flows the kernel signals only once lowWater
// bytes are in, and the reader takes what has arrived when it wakes. Only
// a reader that found nothing lowers the mark to one byte, so that it is
// woken by the next update as before, and raises it again once woken.

// lowWater is the low-water mark while updates flow.
const lowWater = 16 << 10

// batchReader reads a socket whose low-water mark it sets; any other
// connection is read as it is.
type batchReader struct {
	nc  net.Conn
	rc  syscall.RawConn // nil: not a socket, or the mark could not be set
	low bool            // the mark is one byte
}

func newBatchReader(nc net.Conn) *batchReader {
	r := &batchReader{nc: nc}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return r
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return r
	}
	r.rc = rc
	if !r.mark(lowWater) {
		r.rc = nil
	}
	return r
}

// mark sets the low-water mark, reporting whether it was set.
func (r *batchReader) mark(bytes int) bool {
	var serr error
	if err := r.rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, bytes)
	}); err != nil {
		return false
	}
	return serr == nil
}

// read takes what has arrived into p; if nothing has, it waits for the
// next byte, until the connection's read deadline.
func (r *batchReader) read(p []byte) (int, error) {
	if r.rc == nil {
		return r.nc.Read(p)
	}
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for n, rerr = syscall.Read(int(fd), p); rerr == syscall.EINTR; {
			n, rerr = syscall.Read(int(fd), p)
		}
		if rerr == syscall.EAGAIN && !r.low {
			// Raising the mark again is for after the wait: setting
			// it signals at once if a byte came in meanwhile.
			r.low = r.mark(1)
		}
		return rerr != syscall.EAGAIN
	})
	if r.low {
		r.low = !r.mark(lowWater)
	}
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// close leaves the mark as it found it, for a connection read on after.
func (r *batchReader) close() {
	if r.rc != nil {
		r.mark(1)
	}
}
