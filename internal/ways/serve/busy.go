package serve

import (
	"net"
	"time"
)

// refuse answers nc, a connection over the limit, with the busy answer
// and closes it, or closes it at once when there is no busy answer or
// maxRefusing answers are in flight. It is called with s.mu held, and
// unlocks it.
func (s *Server) refuse(nc net.Conn) {
	answer := false
	if s.busy != nil {
		if answer = s.refusing.Add(1) <= maxRefusing; answer {
			s.wg.Add(1)
		} else {
			s.refusing.Add(-1)
		}
	}
	s.mu.Unlock()
	n := s.rejected.Add(1)
	if s.limitLog.allow(time.Now()) {
		s.log.Warn(s.name+": connection limit reached, closing new connections",
			"max_conns", s.maxConns, "rejected_total", n, "local", nc.LocalAddr().String())
	}
	if !answer {
		nc.Close()
		return
	}
	go s.answerBusy(nc)
}

// answerBusy writes the busy answer to nc, lets the client read it
// (closing a socket with unread input would reset it and lose the
// answer), and closes nc, all within busyGrace.
func (s *Server) answerBusy(nc net.Conn) {
	defer s.wg.Done()
	defer s.refusing.Add(-1)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(busyGrace))
	if _, err := nc.Write(s.busy); err != nil {
		return
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	var buf [512]byte
	for range busyDrain / len(buf) { // until the client closes
		if _, err := nc.Read(buf[:]); err != nil {
			return
		}
	}
}
