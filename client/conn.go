package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// replyLen is the length of every reply: "OK\n" or "NO\n".
const replyLen = 3

// reply is what a waiter receives: the daemon's answer, or why there is
// none.
type reply struct {
	ok  bool
	err error
}

// Waiter states. A waiter is owned by Allow until it is queued; then the
// reader (or the connection's failure) and Allow race on state: whoever
// moves it from waiting decides. The reader, on answered, sends the reply;
// Allow, on abandoned, leaves the waiter to the reader, which drops its
// reply and recycles it.
const (
	waiting int32 = iota
	answered
	abandoned
)

// waiter is one query waiting for its reply.
type waiter struct {
	ch    chan reply // capacity 1: delivering never blocks
	timer *time.Timer
	state atomic.Int32
	sent  time.Time   // when Allow began; read under the conn's mu while queued
	pool  *waiterPool // where it is recycled
}

// waiterPool recycles one Client's waiters. It is the Client's, not the
// package's, so that a waiter's channel and timer serve only the
// goroutines of the Client that made them: testing/synctest forbids a
// bubble's channels and timers to any other, and a Client made in a
// bubble is used there.
type waiterPool struct{ p sync.Pool }

// get returns a waiter, waiting, with its timer stopped.
func (wp *waiterPool) get() *waiter {
	w, _ := wp.p.Get().(*waiter)
	if w == nil {
		t := time.NewTimer(time.Hour)
		t.Stop()
		w = &waiter{ch: make(chan reply, 1), timer: t, pool: wp}
	}
	w.state.Store(waiting)
	return w
}

// recycle puts w back in its pool. Its timer must be stopped and its
// channel empty.
func (w *waiter) recycle() { w.pool.p.Put(w) }

// deliver hands r to w, or recycles w if Allow abandoned it.
func (w *waiter) deliver(r reply) {
	if w.state.CompareAndSwap(waiting, answered) {
		w.ch <- r
		return
	}
	w.recycle()
}

// abandon gives up on w's reply. It reports false when the reply was
// already delivered (or is being delivered): then it must be received
// from w.ch.
func (w *waiter) abandon() bool { return w.state.CompareAndSwap(waiting, abandoned) }

// conn is one pipelined connection: queries are appended to wbuf and their
// waiters to a FIFO under mu; the writer goroutine sends wbuf, the reader
// goroutine matches each reply to the FIFO's head.
type conn struct {
	nc   net.Conn
	slot *slot
	wake chan struct{} // capacity 1: wbuf went from empty to not empty
	done chan struct{} // closed by fail

	mu    sync.Mutex
	err   error     // set once, by fail; then nothing more is queued
	wbuf  []byte    // queries not yet handed to the writer
	queue []*waiter // waiters in request order, from head
	head  int
}

// newConn starts nc's writer and reader goroutines, counted in wg.
func newConn(nc net.Conn, s *slot, wg *sync.WaitGroup) *conn {
	cn := &conn{nc: nc, slot: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
	wg.Add(2)
	go func() { defer wg.Done(); cn.writeLoop() }()
	go func() { defer wg.Done(); cn.readLoop() }()
	return cn
}

// send queues tag and its waiter, in the same order.
func (cn *conn) send(tag string, w *waiter) error {
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		return err
	}
	wake := len(cn.wbuf) == 0
	cn.wbuf = append(cn.wbuf, tag...)
	cn.wbuf = append(cn.wbuf, '\n')
	cn.queue = append(cn.queue, w)
	cn.mu.Unlock()
	if wake {
		select {
		case cn.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// oldestBefore reports whether the oldest query still waiting for its
// reply was sent before t.
func (cn *conn) oldestBefore(t time.Time) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.head < len(cn.queue) && cn.queue[cn.head].sent.Before(t)
}

// pop removes and returns the FIFO's head, or nil when it is empty. The
// caller holds mu.
func (cn *conn) pop() *waiter {
	if cn.head == len(cn.queue) {
		return nil
	}
	w := cn.queue[cn.head]
	cn.queue[cn.head] = nil
	cn.head++
	switch {
	case cn.head == len(cn.queue):
		cn.queue, cn.head = cn.queue[:0], 0
	case cn.head >= 64 && cn.head*2 >= len(cn.queue):
		// Never empty under steady load: slide the live part down so the
		// slice does not grow without bound.
		n := copy(cn.queue, cn.queue[cn.head:])
		clear(cn.queue[n:])
		cn.queue, cn.head = cn.queue[:n], 0
	}
	return w
}

// writeLoop sends everything queued since its last write in one Write.
func (cn *conn) writeLoop() {
	var buf []byte
	for {
		select {
		case <-cn.wake:
		case <-cn.done:
			return
		}
		cn.mu.Lock()
		buf, cn.wbuf = cn.wbuf, buf[:0]
		cn.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := cn.nc.Write(buf); err != nil {
			cn.fail(fmt.Errorf("client: writing to %s: %w", cn.nc.RemoteAddr(), err))
			return
		}
	}
}

// readLoop reads replies and hands each to the FIFO's head, until the
// connection fails or is closed.
func (cn *conn) readLoop() {
	var buf [4096]byte
	n := 0
	for {
		m, err := cn.nc.Read(buf[n:])
		n += m
		whole := n - n%replyLen
		if whole > 0 {
			if perr := cn.dispatch(buf[:whole]); perr != nil {
				cn.fail(perr)
				return
			}
			n = copy(buf[:], buf[whole:n])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("client: the daemon closed the connection")
			} else {
				err = fmt.Errorf("client: reading from the daemon: %w", err)
			}
			cn.fail(err)
			return
		}
	}
}

// dispatch delivers whole replies, in order, under one lock.
func (cn *conn) dispatch(b []byte) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for i := 0; i < len(b); i += replyLen {
		var ok bool
		switch string(b[i : i+replyLen]) {
		case "OK\n":
			ok = true
		case "NO\n":
		default:
			return fmt.Errorf("client: bad reply %q from the daemon", b[i:i+replyLen])
		}
		w := cn.pop()
		if w == nil {
			return errors.New("client: reply from the daemon without a query")
		}
		w.deliver(reply{ok: ok})
	}
	return nil
}

// fail closes the connection once, frees its slot for a new dial, and
// fails every waiter still queued with err. Later calls do nothing.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return
	}
	cn.err = err
	cn.slot.cur.CompareAndSwap(cn, nil)
	close(cn.done)
	cn.nc.Close()
	for w := cn.pop(); w != nil; w = cn.pop() {
		w.deliver(reply{err: err})
	}
	cn.wbuf = nil
	cn.mu.Unlock()
}
