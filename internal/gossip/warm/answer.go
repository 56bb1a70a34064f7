package warm

import (
	"errors"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns the answering side of warm start: a peer's request taken
// in, the answers paced out part by part, and the levels they hold unsent
// moved by each report.

// ReceiveRequest starts an answer to a snapshot request, the node having
// accepted it from a peer, unless that node was answered already or too
// many answers are under way.
func (w *Warm) ReceiveRequest(msg wire.Message, p transport.Packet) {
	if w.cfg.Export == nil {
		return
	}
	w.mu.Lock()
	w.stats.RequestsReceived++
	canReply := w.host.CanReply()
	_, seen := w.answered[msg.Node]
	switch {
	case seen || len(w.answers) >= maxStreams || !canReply:
		w.stats.RequestsRefused++
		warn := !canReply && !w.warned
		w.warned = w.warned || warn
		w.mu.Unlock()
		if warn {
			w.log.Warn("warm start: cannot answer a snapshot request: the transport cannot reply to one peer", "peer", p.From)
		}
		return
	}
	if w.answered == nil {
		w.answered = make(map[uint64]time.Time)
	}
	if len(w.answered) >= maxAnswered {
		var oldest uint64
		for id, at := range w.answered {
			if oldest == 0 || at.Before(w.answered[oldest]) {
				oldest = id
			}
		}
		delete(w.answered, oldest)
	}
	w.answered[msg.Node] = p.At
	w.answers = append(w.answers, &answer{to: msg.Node, addr: p.From, more: true})
	w.mu.Unlock()
	w.log.Info("warm start: answering a snapshot request", "peer", p.From, "node", peer.Name(msg.Node))
	w.host.Kick()
}

// Pace sends the next datagrams of the snapshot answers under way, as many
// as the pace (Config.Rate) allows at now, and, while the node warms, asks
// again if no answer came within an interval and ends warming when it is
// done. It reports whether there is more to do: answers under way, or
// warming. The node's running loop calls it every PaceEvery while there
// is; tests on a fake clock call it by hand.
func (w *Warm) Pace(now time.Time) bool {
	w.mu.Lock()
	rate := w.cfg.Rate
	burst := max(8, rate/50)
	if w.filled.IsZero() || now.Sub(w.filled) > time.Second {
		w.budget = burst
	} else if now.After(w.filled) {
		w.budget = min(burst, w.budget+rate*now.Sub(w.filled).Seconds())
	}
	if now.After(w.filled) {
		w.filled = now
	}
	for w.budget >= 1 && len(w.answers) > 0 {
		w.rr %= len(w.answers)
		a := w.answers[w.rr]
		w.budget--
		if w.sendNext(now, a) {
			w.answers = append(w.answers[:w.rr], w.answers[w.rr+1:]...)
			continue
		}
		w.rr++
	}
	ask := false
	if w.stats.Warming {
		ask = !w.heard && now.Sub(w.lastAsk) >= w.host.Interval()
		w.checkWarm(now)
		ask = ask && w.stats.Warming
	}
	more := len(w.answers) > 0 || w.stats.Warming
	w.mu.Unlock()
	if ask {
		if err := w.ask(now); err != nil {
			w.log.Warn("warm start: snapshot request not sent", "err", err)
		}
	}
	return more
}

// sendNext sends the next datagram of answer a and reports whether the
// answer is complete (or abandoned). Called with the lock held.
func (w *Warm) sendNext(now time.Time, a *answer) (done bool) {
	for a.next == len(a.levels) && a.more {
		part := a.part
		a.part++
		a.levels, a.keys, a.more = w.cfg.Export(now, part, a.levels[:0], a.keys[:0])
		a.next = 0
		// Left out: the hits this node sent to relays and has not seen
		// come back, and the asker's that reached it after the request.
		w.unknown(a.levels, +1, a.theirs)
	}
	w.enc.Node = w.host.ID()
	w.host.Configure(&w.enc)
	var sent int
	packed, skipped, err := w.enc.EncodeSnapshot(now, a.to, a.levels[a.next:], !a.more, func(pkt []byte) error {
		sent = len(pkt)
		return w.host.SendTo(pkt, a.addr)
	})
	a.next += packed
	if err != nil {
		if errors.Is(err, transport.ErrNoUnicast) {
			w.stats.RequestsRefused++
			return true
		}
		w.host.SendFailed()
	} else if sent > 0 {
		w.stats.AnswersSent++
		w.stats.AnswerBytesSent += uint64(sent)
		w.stats.TagsSent += uint64(packed - skipped)
	}
	done = !a.more && a.next == len(a.levels)
	if len(a.levels) > 64<<10 && a.next == len(a.levels) {
		a.levels, a.keys, a.next = nil, nil, 0 // do not keep a large part's buffers
	}
	return done
}

// reported moves the levels the answers under way hold and have not sent
// by the hits a report is about to send: each level was exported without
// them as unreported hits, and reaches the asker after the report, which
// the asker counts. Called with the lock held.
func (w *Warm) reported(hits []wire.Hit) {
	var spent map[string]uint32
	for _, a := range w.answers {
		if a.next == len(a.levels) {
			continue
		}
		if spent == nil {
			if len(hits) == 0 {
				return
			}
			spent = make(map[string]uint32, len(hits))
			for _, h := range hits {
				spent[h.Key] += h.Count
			}
		}
		spend(a.levels[a.next:], spent, -1)
	}
}
