// Package warm is a node's warm start between peers: a starting node asks
// its peers for their table (Warm), merges what they answer, and answers,
// paced (Pace), the requests of the nodes that start after it.
//
// Warm start is a part the node is given (gossip.NewNode makes one): it
// reaches the node through Host, and the node tells it, under its lock
// (Lock), whatever changes what peers know of the table: the hits a
// report sends (Known), the hits a relay's aggregate brings back, and a
// peer's hits applied while this node answers that peer (Theirs). The
// rule those keep, every hit counted once, is docs/design.md's "Every hit
// counts once".
package warm

import (
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// Host is the node warm start is part of.
type Host interface {
	// ID is the node's id, which answers to it name.
	ID() uint64
	// Interval is the node's report interval now.
	Interval() time.Duration
	// Configure sets e's datagram size, key and fingerprint to the node's.
	Configure(e *wire.Encoder)
	// Request sends a snapshot request to every peer in the node's own
	// sequence of datagrams, and calls sent with the outcome before any
	// report can follow it.
	Request(now time.Time, sent func(err error))
	// SendTo sends pkt to the peer at addr, or returns
	// transport.ErrNoUnicast when the node's transport cannot.
	SendTo(pkt []byte, addr string) error
	// CanReply says whether the node's transport can send to one peer.
	CanReply() bool
	// Heard notes the sender of an authenticated answer as a peer heard.
	Heard(node uint64, p transport.Packet)
	// SendFailed counts a datagram that could not be sent.
	SendFailed()
	// Kick wakes the node's running loop to call Pace.
	Kick()
}

// Config configures warm start. Export and Merge are the table's.
type Config struct {
	// Export, when set, lets the node answer peers' snapshot requests: it
	// appends to dst the levels at now of the tags of part part of the
	// table whose buckets are below their burst, their keys to keys, and
	// reports whether parts follow. Parts are numbered from 0. Levels are
	// in the reported frame: without the hits the node has yet to report,
	// which the asker counts from the next report. Warm start moves the
	// levels it holds unsent by what each report sends (Known), so what it
	// sends after a report holds that report's hits.
	Export func(now time.Time, part int, dst []wire.Level, keys []byte) ([]wire.Level, []byte, bool)
	// Merge, when set, lets the node warm start (Warm): it lowers the
	// table's buckets to the levels a peer answered, as of now, and
	// returns how many it lowered. A level is in the reported frame: the
	// table compares it with its buckets without the hits the node has yet
	// to report, and spends those on the level it takes.
	Merge func(now time.Time, levels []wire.Level) int
	// Pending moves levels, by sign, by the node's own hits that its
	// peers do not know yet because they sit at a relay (relay.OwnHits);
	// nil when the node does not relay.
	Pending func(levels []wire.Level, sign float64)
	// Rate is how many snapshot datagrams a second the node sends over all
	// the answers under way. Default DefaultRate.
	Rate float64
	// Logger; nil discards.
	Logger *slog.Logger
}

// Stats count warm start, both ways.
type Stats struct {
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
	// DefaultRate is how many snapshot datagrams a node sends per second,
	// over all its answers: 5000 datagrams of 1400 bytes, 7 MB/s, some
	// 250,000 tags a second.
	DefaultRate = 5000
	// PaceEvery is how often the running loop calls Pace while it says
	// there is more to do.
	PaceEvery = 10 * time.Millisecond
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
	levels []wire.Level
	keys   []byte
	next   int // first level in hand not yet sent
	// theirs are the asker's hits applied here since its request, which
	// the answer leaves out: the asker counts them itself (Warm.since).
	theirs map[string]uint32
}

// maxTheirs bounds an answer's record of the asker's hits: past it, a new
// tag's hits stay in the levels sent and the asker counts them twice,
// which refuses early, never late.
const maxTheirs = 1 << 16

// stream is what the asker knows of one peer's answer.
type stream struct {
	seq   peer.Peer // the answer's own sequence window
	last  time.Time
	whole bool
}

// Warm is a node's warm start, both ways. Its lock guards all of it; the
// node holds it (Lock) while it changes what peers know of the table.
type Warm struct {
	cfg  Config
	host Host
	log  *slog.Logger

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
	from           map[uint64]*stream
	// since are the hits this node reported to every peer since its last
	// request, while it warms: answers leave them out (answer.theirs),
	// so a merge spends them again, as it does the unreported ones.
	since map[string]uint32
	stats Stats
}

// New returns the warm start part of the node host.
func New(cfg Config, host Host) *Warm {
	if !(cfg.Rate > 0) {
		cfg.Rate = DefaultRate
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Warm{cfg: cfg, host: host, log: cfg.Logger}
}

// Lock holds back every export: the node holds it while the table and
// what peers know of it change together, and tells warm start what
// changed (Known, Theirs) before it lets go.
func (w *Warm) Lock() { w.mu.Lock() }

// Unlock lets exports go on.
func (w *Warm) Unlock() { w.mu.Unlock() }

// Warm asks the peers for their table, at now. Answers are merged as they
// arrive, until every answer that began is whole and an interval has
// passed, or two intervals have passed with no answer under way (at most
// warmCap intervals). Without Config.Merge it does nothing; a second call
// does nothing.
func (w *Warm) Warm(now time.Time) error {
	if w.cfg.Merge == nil {
		return nil
	}
	w.mu.Lock()
	if !w.asked.IsZero() {
		w.mu.Unlock()
		return nil
	}
	w.asked, w.stats.Warming = now, true
	w.from = make(map[uint64]*stream)
	w.mu.Unlock()
	w.host.Kick()
	return w.ask(now)
}

// ask sends a snapshot request to every peer. The request is the cut
// between what the answers hold and what this node counts itself: a peer
// leaves out of its answer this node's hits that reach it after the
// request, so the record of the hits reported since starts afresh, before
// any report can follow the request.
func (w *Warm) ask(now time.Time) error {
	var err error
	w.host.Request(now, func(serr error) {
		err = serr
		w.mu.Lock()
		w.lastAsk = now
		if err == nil {
			w.stats.RequestsSent++
			w.since = nil
		}
		w.mu.Unlock()
	})
	return err
}

// Known says that peers know hits of this node's from now on: a report
// sent them to every peer (toAll), or a relay's aggregate brought them
// back. Answers under way take them into the levels they hold unsent;
// while this node warms, the hits a report sends to every peer are
// recorded as reported since the request. Called with the lock held.
func (w *Warm) Known(hits []wire.Hit, toAll bool) {
	w.reported(hits)
	if toAll && w.stats.Warming {
		w.since = tally(w.since, hits)
	}
}

// Theirs says that the node is about to apply hits node from reported,
// and reports whether an answer to that node is under way: then it has
// recorded them, the answer leaves them out, and the node must apply them
// before it lets go of the lock. Called with the lock held.
func (w *Warm) Theirs(from uint64, hits []wire.Hit) bool {
	var a *answer
	for _, x := range w.answers {
		if x.to == from {
			a = x
		}
	}
	if a == nil {
		return false
	}
	a.theirs = tally(a.theirs, hits)
	return true
}

// tally adds hits to m, made if nil, and returns it: past maxTheirs tags,
// only to the tags it holds.
func tally(m map[string]uint32, hits []wire.Hit) map[string]uint32 {
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

// ReceiveAnswer merges an answer addressed to this node while it warms.
// Answers to one node number their own sequence, so the node hands them
// over before its own sequence checks.
func (w *Warm) ReceiveAnswer(msg wire.Message, p transport.Packet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if msg.Snapshot.To != w.host.ID() || !w.stats.Warming {
		w.stats.DroppedUnasked++
		return
	}
	s := w.from[msg.Node]
	if s == nil {
		if len(w.from) >= peer.Max {
			w.stats.DroppedUnasked++
			return
		}
		s = &stream{}
		w.from[msg.Node] = s
	}
	if s.whole || !s.seq.Accept(msg.Seq, p.At) {
		w.stats.DroppedDuplicate++
		return
	}
	s.seq.Info.Packets++
	s.last = p.At
	// An authenticated answer is a peer heard, as a report is.
	w.host.Heard(msg.Node, p)
	w.heard = true
	w.stats.AnswersReceived++
	w.stats.AnswerBytesRecv += uint64(len(p.Data))
	w.stats.TagsReceived += uint64(len(msg.Snapshot.Levels))
	if len(msg.Snapshot.Levels) > 0 {
		// What no peer's level holds is spent on it again: the hits this
		// node sent to relays and has not seen come back, and those it
		// reported since its request.
		w.unknown(msg.Snapshot.Levels, -1, w.since)
		w.stats.TagsAdopted += uint64(w.cfg.Merge(p.At, msg.Snapshot.Levels))
	}
	if msg.Snapshot.Last {
		s.whole = true
		w.stats.PeersAnswered++
	}
	w.checkWarm(p.At)
}

// checkWarm ends warming when it is done. Called with the lock held.
func (w *Warm) checkWarm(now time.Time) {
	if !w.stats.Warming {
		return
	}
	interval := w.host.Interval()
	since := now.Sub(w.asked)
	open := false
	for _, s := range w.from {
		if !s.whole && now.Sub(s.last) < interval {
			open = true
		}
	}
	done := since >= warmCap*interval ||
		!open && (since >= 2*interval || w.stats.PeersAnswered > 0 && since >= interval)
	if !done {
		return
	}
	w.stats.Warming, w.stats.Warm, w.stats.WarmDuration = false, true, since
	w.since = nil
	w.log.Info("warm start: done", "peers_answered", w.stats.PeersAnswered, "tags", w.stats.TagsReceived,
		"adopted", w.stats.TagsAdopted, "took", since)
}

// unknown moves levels, by sign, by the hits of this node's own that its
// peers do not know yet because they sit at a relay, and by hits.
func (w *Warm) unknown(levels []wire.Level, sign float64, hits map[string]uint32) {
	if w.cfg.Pending != nil {
		w.cfg.Pending(levels, sign)
	}
	spend(levels, hits, sign)
}

// spend moves each level by the hits of its tag in hits, by sign.
func spend(levels []wire.Level, hits map[string]uint32, sign float64) {
	if len(hits) == 0 {
		return
	}
	for i := range levels {
		if c, ok := hits[string(levels[i].Key)]; ok {
			levels[i].Tokens += sign * float64(c)
		}
	}
}

// Stats returns the warm start counters.
func (w *Warm) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}
