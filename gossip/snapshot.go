package gossip

import (
	"errors"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/gossip/transport"
	"github.com/dthrottle/dthrottle/gossip/wire"
)

// This file owns warm start between peers: a starting node asks its peers
// for their table (Warm), merges what they answer, and answers the
// requests of the nodes that start after it, paced (Pace).

// WarmStats count warm start, both ways.
type WarmStats struct {
	RequestsSent     uint64 // snapshot requests this node sent
	RequestsReceived uint64 // snapshot requests from peers
	RequestsRefused  uint64 // a node already answered, too many answers at once, or no way to reply
	AnswersSent      uint64 // snapshot datagrams sent
	AnswerBytesSent  uint64
	TagsSent         uint64
	AnswersReceived  uint64 // snapshot datagrams merged
	AnswerBytesRecv  uint64
	TagsReceived     uint64
	TagsAdopted      uint64 // buckets an answer lowered
	DroppedUnasked   uint64 // answers to another node, or when not warming
	DroppedDuplicate uint64 // answers seen twice
	PeersAnswered    uint64 // answers received whole
	Warming          bool   // asked, not yet done
	Warm             bool   // done: every answer in, or the wait is over
	WarmDuration     time.Duration
}

// Answer limits. A node answers each asking node id at most once (ids are
// random per start, so once per start of the asker), remembering the last
// maxAnswered ids, and sends at most maxStreams answers at once.
const (
	maxAnswered = 4096
	maxStreams  = 16
	// DefaultSnapshotRate is how many snapshot datagrams a node sends per
	// second, over all its answers: 5000 datagrams of 1400 bytes, 7 MB/s,
	// some 250,000 tags a second.
	DefaultSnapshotRate = 5000
	// paceEvery is how often the running loop sends the next datagrams.
	paceEvery = 10 * time.Millisecond
	// warmCap bounds the wait for answers, in intervals, however long
	// they keep coming.
	warmCap = 30
)

// answer is one snapshot answer being sent.
type answer struct {
	to     uint64 // the asking node
	addr   string // where its request came from
	part   int    // next part of the table to export
	more   bool   // parts left after the levels in hand
	levels []Level
	keys   []byte
	next   int // first level in hand not yet sent
	// theirs are the asker's hits applied here since its request, which
	// the answer leaves out: the asker counts them itself (snapState.since).
	theirs map[string]uint32
}

// maxTheirs bounds an answer's record of the asker's hits: past it, a new
// tag's hits stay in the levels sent and the asker counts them twice,
// which refuses early, never late.
const maxTheirs = 1 << 16

// warmStream is what the asker knows of one peer's answer.
type warmStream struct {
	seq   peer // the answer's own sequence window
	last  time.Time
	whole bool
}

// snapState is a node's warm start state, guarded by its mu.
type snapState struct {
	mu       sync.Mutex
	enc      wire.Encoder // answers, with their own sequence
	answers  []*answer
	rr       int
	answered map[uint64]time.Time
	budget   float64
	filled   time.Time
	warned   bool // no way to reply logged

	// The asker's side.
	asked, lastAsk time.Time
	heard          bool
	from           map[uint64]*warmStream
	// since are the hits this node reported to every peer since its last
	// request, while it warms: answers leave them out (answer.theirs),
	// so a merge spends them again, as it does the unreported ones.
	since map[string]uint32
	stats WarmStats
}

// kickLoop wakes the running loop to pace.
func (n *Node) kickLoop() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Warm asks the peers for their table, at now. Answers are merged as they
// arrive, until every answer that began is whole and an interval has
// passed, or two intervals have passed with no answer under way (at most
// warmCap intervals). A node without Config.Merge does nothing; a second
// call does nothing.
func (n *Node) Warm(now time.Time) error {
	if n.cfg.Merge == nil {
		return nil
	}
	s := &n.snap
	s.mu.Lock()
	if !s.asked.IsZero() {
		s.mu.Unlock()
		return nil
	}
	s.asked, s.stats.Warming = now, true
	s.from = make(map[uint64]*warmStream)
	s.mu.Unlock()
	n.kickLoop()
	return n.ask(now)
}

// ask sends a snapshot request to every peer. The request is the cut
// between what the answers hold and what this node counts itself: a peer
// leaves out of its answer this node's hits that reach it after the
// request, so the record of the hits reported since starts afresh.
func (n *Node) ask(now time.Time) error {
	n.reportMu.Lock()
	defer n.reportMu.Unlock()
	n.configure(&n.enc)
	err := n.enc.EncodeRequest(now, n.transport.Send)
	s := &n.snap
	s.mu.Lock()
	s.lastAsk = now
	if err == nil {
		s.stats.RequestsSent++
		s.since = nil
	}
	s.mu.Unlock()
	return err
}

// sentToAll notes hits a report sends to every peer: peers know them
// from now on. Answers under way take them into the levels they hold
// unsent; while warming, they are recorded as reported since the request.
// Called with s.mu held.
func (s *snapState) sentToAll(hits []Hit) {
	s.reported(hits)
	if s.stats.Warming {
		s.since = tally(s.since, hits)
	}
}

// tally adds hits to m, made if nil, and returns it: past maxTheirs tags,
// only to the tags it holds.
func tally(m map[string]uint32, hits []Hit) map[string]uint32 {
	if len(hits) == 0 {
		return m
	}
	if m == nil {
		m = make(map[string]uint32, len(hits))
	}
	for _, h := range hits {
		if _, ok := m[h.Key]; ok || len(m) < maxTheirs {
			m[h.Key] += h.Count
		}
	}
	return m
}

// applyHits applies a peer's reported hits, and records them in the
// answer under way to that peer, if any, which leaves them out.
func (n *Node) applyHits(from uint64, at time.Time, hits []Hit) {
	s := &n.snap
	s.mu.Lock()
	var a *answer
	for _, x := range s.answers {
		if x.to == from {
			a = x
		}
	}
	if a == nil {
		s.mu.Unlock()
		n.cfg.Apply(at, hits)
		return
	}
	a.theirs = tally(a.theirs, hits)
	// Applied under the lock: no level is exported between the table
	// taking the hits and the answer's record of them.
	n.cfg.Apply(at, hits)
	s.mu.Unlock()
}

// receiveRequest starts an answer to a snapshot request, unless its node
// was answered already or too many answers are under way.
func (n *Node) receiveRequest(msg wire.Message, p transport.Packet) {
	if n.cfg.Export == nil {
		return
	}
	s := &n.snap
	s.mu.Lock()
	s.stats.RequestsReceived++
	_, isUnicaster := n.transport.(transport.Unicaster)
	_, seen := s.answered[msg.Node]
	switch {
	case seen || len(s.answers) >= maxStreams || !isUnicaster:
		s.stats.RequestsRefused++
		warn := !isUnicaster && !s.warned
		s.warned = s.warned || warn
		s.mu.Unlock()
		if warn {
			n.log.Warn("warm start: cannot answer a snapshot request: the transport cannot reply to one peer", "peer", p.From)
		}
		return
	}
	if s.answered == nil {
		s.answered = make(map[uint64]time.Time)
	}
	if len(s.answered) >= maxAnswered {
		var oldest uint64
		for id, at := range s.answered {
			if oldest == 0 || at.Before(s.answered[oldest]) {
				oldest = id
			}
		}
		delete(s.answered, oldest)
	}
	s.answered[msg.Node] = p.At
	s.answers = append(s.answers, &answer{to: msg.Node, addr: p.From, more: true})
	s.mu.Unlock()
	n.log.Info("warm start: answering a snapshot request", "peer", p.From, "node", nodeName(msg.Node))
	n.kickLoop()
}

// receiveSnapshot merges an answer addressed to this node while it warms.
func (n *Node) receiveSnapshot(msg wire.Message, p transport.Packet) {
	s := &n.snap
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg.Snapshot.To != n.id || !s.stats.Warming {
		s.stats.DroppedUnasked++
		return
	}
	w := s.from[msg.Node]
	if w == nil {
		if len(s.from) >= maxPeers {
			s.stats.DroppedUnasked++
			return
		}
		w = &warmStream{}
		s.from[msg.Node] = w
	}
	if w.whole || !w.seq.accept(msg.Seq) {
		s.stats.DroppedDuplicate++
		return
	}
	w.seq.info.Packets++
	w.last = p.At
	// An authenticated answer is a peer heard, as a report is.
	n.mu.Lock()
	pr, _ := n.peer(msg.Node, p)
	pr.info.Addr, pr.info.LastHeard, pr.info.Silent = p.From, p.At, false
	n.mu.Unlock()
	s.heard = true
	s.stats.AnswersReceived++
	s.stats.AnswerBytesRecv += uint64(len(p.Data))
	s.stats.TagsReceived += uint64(len(msg.Snapshot.Levels))
	if len(msg.Snapshot.Levels) > 0 {
		// What no peer's level holds is spent on it again: the hits this
		// node sent to relays and has not seen come back, and those it
		// reported since its request.
		n.unknown(msg.Snapshot.Levels, -1, s.since)
		s.stats.TagsAdopted += uint64(n.cfg.Merge(p.At, msg.Snapshot.Levels))
	}
	if msg.Snapshot.Last {
		w.whole = true
		s.stats.PeersAnswered++
	}
	n.checkWarm(p.At)
}

// checkWarm ends warming when it is done. Called with s.mu held.
func (n *Node) checkWarm(now time.Time) {
	s := &n.snap
	if !s.stats.Warming {
		return
	}
	n.mu.Lock()
	interval := n.cfg.Interval
	n.mu.Unlock()
	since := now.Sub(s.asked)
	open := false
	for _, w := range s.from {
		if !w.whole && now.Sub(w.last) < interval {
			open = true
		}
	}
	done := since >= warmCap*interval ||
		!open && (since >= 2*interval || s.stats.PeersAnswered > 0 && since >= interval)
	if !done {
		return
	}
	s.stats.Warming, s.stats.Warm, s.stats.WarmDuration = false, true, since
	s.since = nil
	n.log.Info("warm start: done", "peers_answered", s.stats.PeersAnswered, "tags", s.stats.TagsReceived,
		"adopted", s.stats.TagsAdopted, "took", since)
}

// Pace sends the next datagrams of the snapshot answers under way, as many
// as the pace (Config.SnapshotRate) allows at now, and, while the node
// warms, asks again if no answer came within an interval and ends warming
// when it is done. It reports whether there is more to do: answers under
// way, or warming. Run calls it every 10ms while there is; tests on a fake
// clock call it by hand.
func (n *Node) Pace(now time.Time) bool {
	s := &n.snap
	s.mu.Lock()
	rate := n.cfg.SnapshotRate
	burst := max(8, rate/50)
	if s.filled.IsZero() || now.Sub(s.filled) > time.Second {
		s.budget = burst
	} else if now.After(s.filled) {
		s.budget = min(burst, s.budget+rate*now.Sub(s.filled).Seconds())
	}
	if now.After(s.filled) {
		s.filled = now
	}
	for s.budget >= 1 && len(s.answers) > 0 {
		s.rr %= len(s.answers)
		a := s.answers[s.rr]
		s.budget--
		if n.sendNext(now, a) {
			s.answers = append(s.answers[:s.rr], s.answers[s.rr+1:]...)
			continue
		}
		s.rr++
	}
	ask := false
	if s.stats.Warming {
		n.mu.Lock()
		interval := n.cfg.Interval
		n.mu.Unlock()
		ask = !s.heard && now.Sub(s.lastAsk) >= interval
		n.checkWarm(now)
		ask = ask && s.stats.Warming
	}
	more := len(s.answers) > 0 || s.stats.Warming
	s.mu.Unlock()
	if ask {
		if err := n.ask(now); err != nil {
			n.log.Warn("warm start: snapshot request not sent", "err", err)
		}
	}
	return more
}

// sendNext sends the next datagram of answer a and reports whether the
// answer is complete (or abandoned). Called with s.mu held.
func (n *Node) sendNext(now time.Time, a *answer) (done bool) {
	s := &n.snap
	for a.next == len(a.levels) && a.more {
		part := a.part
		a.part++
		a.levels, a.keys, a.more = n.cfg.Export(now, part, a.levels[:0], a.keys[:0])
		a.next = 0
		// Left out: the hits this node sent to relays and has not seen
		// come back, and the asker's that reached it after the request.
		n.unknown(a.levels, +1, a.theirs)
	}
	s.enc.Node = n.id
	n.configure(&s.enc)
	var sent int
	packed, skipped, err := s.enc.EncodeSnapshot(now, a.to, a.levels[a.next:], !a.more, func(pkt []byte) error {
		sent = len(pkt)
		return n.transport.(transport.Unicaster).SendTo(pkt, a.addr)
	})
	a.next += packed
	if err != nil {
		if errors.Is(err, transport.ErrNoUnicast) {
			s.stats.RequestsRefused++
			return true
		}
		n.mu.Lock()
		n.stats.SendErrors++
		n.mu.Unlock()
	} else if sent > 0 {
		s.stats.AnswersSent++
		s.stats.AnswerBytesSent += uint64(sent)
		s.stats.TagsSent += uint64(packed - skipped)
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
// the asker counts. Called with s.mu held.
func (s *snapState) reported(hits []Hit) {
	var spent map[string]uint32
	for _, a := range s.answers {
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

// unknown moves levels, by sign, by the hits of this node's own that its
// peers do not know yet because they sit at a relay, and by hits.
func (n *Node) unknown(levels []Level, sign float64, hits map[string]uint32) {
	n.relay.mu.Lock()
	n.relay.own.Pending(levels, sign)
	n.relay.mu.Unlock()
	spend(levels, hits, sign)
}

// spend moves each level by the hits of its tag in hits, by sign.
func spend(levels []Level, hits map[string]uint32, sign float64) {
	if len(hits) == 0 {
		return
	}
	for i := range levels {
		if c, ok := hits[string(levels[i].Key)]; ok {
			levels[i].Tokens += sign * float64(c)
		}
	}
}

// WarmStats returns the node's warm start counters.
func (n *Node) WarmStats() WarmStats {
	n.snap.mu.Lock()
	defer n.snap.mu.Unlock()
	return n.snap.stats
}
