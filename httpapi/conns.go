package httpapi

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// busy is the whole answer to a connection over MaxConns.
var busy = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 22\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\r\n")

// busyWrite bounds how long answering a connection over the limit may
// take: the accepting goroutine does it.
const busyWrite = 100 * time.Millisecond

// limitListener accepts connections while fewer than the server's maximum
// are open; one more is answered 503 and closed at once, so a proxy hears
// a clear status instead of waiting in the listen backlog.
type limitListener struct {
	net.Listener
	s *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		s := l.s
		if s.active.Add(1) <= s.max {
			s.accepted.Add(1)
			return &countedConn{Conn: c, s: s}, nil
		}
		s.active.Add(-1)
		s.rejected.Add(1)
		if s.refusing.Add(1) <= maxRefusing {
			go refuseConn(c, &s.refusing)
		} else {
			s.refusing.Add(-1)
			c.Close()
		}
		if now := time.Now().UnixNano(); now-s.lastLog.Load() >= int64(time.Second) {
			s.lastLog.Store(now)
			s.log.Warn("http endpoint: connection over max_conns answered 503", "max_conns", s.max,
				"rejected", s.rejected.Load(), "remote", c.RemoteAddr().String())
		}
	}
}

// maxRefusing bounds the connections being answered 503 at once; past
// it, a connection over the limit is closed without an answer.
const maxRefusing = 256

// refuseConn answers c 503, lets the client read it (closing a socket
// with unread input would reset it and lose the answer), and closes it.
func refuseConn(c net.Conn, refusing *atomic.Int64) {
	defer refusing.Add(-1)
	defer c.Close()
	c.SetDeadline(time.Now().Add(busyWrite))
	if _, err := c.Write(busy); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	var buf [512]byte
	for n := 0; n < 16; n++ { // at most 8 KiB, until the client closes
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// countedConn gives its place back when closed, once.
type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.active.Add(-1) })
	return err
}
