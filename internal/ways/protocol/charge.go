package protocol

import (
	"bytes"
	"math"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file serves the charge form of the line protocol on a socket of
// its own: "<n> <tag>" lines, a cost charged after the response (the
// package's doc, Charges).

// Replies of the charge form.
const (
	replyCharged = replyOK
	replyBad     = "BAD\n"
)

// ChargeStats is a snapshot of a ChargeServer's counters, all since
// NewChargeServer: a plain value, whose zero value is a server that has
// served nothing.
type ChargeStats struct {
	serve.Stats        // connections: accepted, rejected over MaxConns, active
	Charged     uint64 // lines answered OK: charges of 0 tokens and of empty tags included
	Bad         uint64 // lines answered BAD
	LineTooLong uint64 // connections closed for a line longer than MaxLine
}

// ChargeServer serves the charge form of the line protocol on any number
// of listeners: a serve.Server (Serve, Shutdown, Close) whose handler
// reads charges as a Server reads queries, with the same line cap,
// batching of replies, end of input and shutdown. It is safe for
// concurrent use. The zero value is not usable: call NewChargeServer.
type ChargeServer struct {
	*serve.Server
	h *handler
}

// NewChargeServer returns a ChargeServer charging through c; cfg is a
// Server's. It panics if c is nil.
func NewChargeServer(c decide.Charger, cfg Config) *ChargeServer {
	if c == nil {
		panic("protocol: NewChargeServer with nil decide.Charger")
	}
	h, maxConns := newHandler(cfg)
	h.charger = c
	srv := serve.New(h, serve.Config{Name: "charge socket", MaxConns: maxConns, Logger: h.log})
	h.log = h.log.With("socket", "charge")
	return &ChargeServer{Server: srv, h: h}
}

// Stats returns a snapshot of the server's counters. It visits every live
// connection, so it costs in proportion to them: it is for scrapes.
func (s *ChargeServer) Stats() ChargeStats {
	bad := s.h.stats.bad.Load() // before the lines, which count it first
	return ChargeStats{Stats: s.Server.Stats(), Charged: s.h.queries() - bad, Bad: bad,
		LineTooLong: s.h.stats.lineTooLong.Load()}
}

// parseCharge splits a charge line, less its '\n' and '\r': n, the digits
// before the first space, and the tag, every byte after it. ok is false
// when there is no space, no digit before it, anything else than a digit,
// or a count over 2^32-1.
func parseCharge(line []byte) (n uint32, tag []byte, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 1 {
		return 0, nil, false
	}
	var v uint64
	for _, c := range line[:sp] {
		if c < '0' || c > '9' {
			return 0, nil, false
		}
		if v = v*10 + uint64(c-'0'); v > math.MaxUint32 {
			return 0, nil, false
		}
	}
	return uint32(v), line[sp+1:], true
}

// charge answers one charge line: OK once charged (an empty tag is
// charged nothing, without asking ch), BAD for a malformed line.
func charge(out []byte, ch decide.Charger, now time.Time, line []byte) (_ []byte, ok bool) {
	n, tag, ok := parseCharge(line)
	if !ok {
		return append(out, replyBad...), false
	}
	if len(tag) > 0 {
		ch.Charge(now, tag, n)
	}
	return append(out, replyCharged...), true
}

// answerCharges is answerLines for charge lines: it answers the complete
// lines at the start of in, in order, appending one reply per line to
// out, until in holds no further '\n' or out has reached limit bytes. It
// returns the extended out, the bytes of in consumed, the lines answered
// and, of those, the lines answered BAD. Every charge is made at now.
func answerCharges(out, in []byte, now time.Time, ch decide.Charger, limit int) (_ []byte, consumed, lines, bad int) {
	for len(out) < limit {
		line, n := nextLine(in[consumed:])
		if n == 0 {
			break
		}
		consumed += n
		lines++
		var ok bool
		if out, ok = charge(out, ch, now, line); !ok {
			bad++
		}
	}
	return out, consumed, lines, bad
}
