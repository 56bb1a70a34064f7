package gossip

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// Hit is a tag's key and the hits served for it in one period, as the
// table drains them and as they travel (wire.Hit, the table's bucket.Hit).
type Hit = wire.Hit

// Level is one tag's bucket level, as the table exports and merges it and
// as a snapshot answer carries it (wire.Level, the table's bucket.Level).
type Level = wire.Level

// Config describes a Node. Drain, Apply, Interval, MaxPacket and
// ForgetAfter are required (dthrottled gives its [gossip] values); the
// rest have defaults.
type Config struct {
	// Interval between reports, > 0.
	Interval time.Duration
	// MaxPacket is the largest datagram sent, in bytes, from
	// wire.MinPacket to wire.MaxPacket.
	MaxPacket int
	// Key, when set, signs every datagram with HMAC-SHA256 and drops any
	// received without a valid signature.
	Key []byte
	// Fingerprint of this node's policies, sent in every datagram; a peer
	// whose fingerprint differs is warned about once and counted.
	Fingerprint uint64
	// Drain appends the hits served since the last call and zeroes them.
	Drain func(dst []Hit) []Hit
	// Apply subtracts hits a peer served; now is the datagram's arrival.
	Apply func(now time.Time, hits []Hit)
	// SilentAfter is how long a peer may go unheard before it is logged as
	// silent. Default 3 intervals, at least 1s more than one interval; an
	// Update of the interval resets it to that default.
	SilentAfter time.Duration
	// Since is the earliest send time accepted: a datagram sent before it
	// is dropped as stale. Zero means the time NewNode is called, so a
	// restarted node never applies a datagram its former self may have
	// applied already (see Receive).
	Since time.Time
	// Export, when set, lets the node answer peers' snapshot requests
	// (warm start, package warm: warm.Config.Export says what it returns;
	// "the hits the node has yet to report" are those Drain has yet to
	// return).
	Export func(now time.Time, part int, dst []Level, keys []byte) ([]Level, []byte, bool)
	// Merge, when set, lets the node warm start (Warm; warm.Config.Merge).
	Merge func(now time.Time, levels []Level) int
	// SnapshotRate is how many snapshot datagrams a second the node sends
	// over all the answers under way. Default warm.DefaultRate.
	SnapshotRate float64
	// Discovery, when set with a Key, learns unicast peers from the
	// authenticated reports heard and from the peers they list, and the
	// node advertises the peers it sends to (discovery.go).
	Discovery Discovery
	// Relay configures relaying (package relay); its zero value sends to
	// every peer, as without relays.
	Relay relay.Config
	// Top, when set, gives this node's heaviest tags at now (package
	// top), which every report sends its peers in one datagram (top.go);
	// it is given the hits the report drained, to count them, and must
	// not retain them. HeardTop, when set, takes a peer's, arrived at now.
	Top      func(now time.Time, drained []Hit) wire.TopReport
	HeardTop func(node uint64, now time.Time, r wire.TopReport)
	// ForgetAfter is how long a silent peer is missing before it is
	// forgotten; Members, when set, is given the membership whenever it
	// changes (members.go). Required, > 0.
	ForgetAfter time.Duration
	Members     func(Members)
	// Logger; nil discards.
	Logger *slog.Logger
}

// PeerInfo is what a node knows of one peer, for logs and the admin view.
type PeerInfo = peer.Info

// Node reports this host's hits to its peers and applies theirs. Report
// and Receive may be driven by hand (tests on a fake clock do) or by Run.
// Safe for concurrent use.
type Node struct {
	cfg       Config
	transport transport.Transport
	log       *slog.Logger
	id        uint64

	reportMu  sync.Mutex // one report at a time; guards enc, repairEnc and hits
	enc       wire.Encoder
	repairEnc wire.Encoder // repair requests: a sequence no receiver checks
	hits      []Hit
	sent      sentLog // what this node sent, for repair

	mu          sync.Mutex // guards peers, stats, repairStats and authWarned
	peers       peer.Table
	stats       Stats
	repairStats RepairStats
	authWarned  time.Time // when dropped unsigned reports were last logged

	// The node's parts (parts.go): warm start, whose lock every change of
	// what peers know of the table holds, and relaying.
	warm  warmPart
	relay relayPart

	members members // who is in the cluster, and this node's share (members.go)

	advertised  uint64 // Discovery's version last advertised; guarded by reportMu
	sinceAdvert int    // reports since then
	toldTop     bool   // the last report's heaviest tags were not empty; guarded by reportMu

	started atomic.Bool
	kick    chan struct{}      // wakes the running loop to pace snapshots
	retick  chan time.Duration // a new interval for the running loop
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// NewNode returns a node with a random id that reports over t.
func NewNode(cfg Config, t transport.Transport) (*Node, error) {
	if cfg.Drain == nil || cfg.Apply == nil {
		return nil, errors.New("gossip: Drain and Apply are required")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("gossip: interval must be > 0, got %v", cfg.Interval)
	}
	if cfg.ForgetAfter <= 0 {
		return nil, fmt.Errorf("gossip: forget after must be > 0, got %v", cfg.ForgetAfter)
	}
	if err := checkMaxPacket(cfg.MaxPacket); err != nil {
		return nil, err
	}
	if cfg.SilentAfter <= 0 {
		cfg.SilentAfter = silentAfter(cfg.Interval)
	}
	if cfg.Discovery != nil {
		cfg.Discovery.SilentAfter(cfg.SilentAfter)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Since.IsZero() {
		cfg.Since = time.Now()
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:       cfg,
		transport: t,
		log:       cfg.Logger,
		id:        id,
		enc:       wire.Encoder{Node: id},
		peers:     peer.Table{},
		kick:      make(chan struct{}, 1),
		retick:    make(chan time.Duration, 1),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	relaying := relay.NewPart(cfg.Relay, host{n}, cfg.Interval, silentAfter(cfg.Interval))
	n.relay = relaying
	n.SetForgetAfter(cfg.ForgetAfter)
	n.warm = warm.New(warm.Config{Export: cfg.Export, Merge: cfg.Merge, Pending: relaying.Pending,
		Rate: cfg.SnapshotRate, Logger: cfg.Logger}, host{n})
	return n, nil
}

func randomID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("gossip: node id: %w", err)
		}
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}

// ID is this node's id, random for every process start.
func (n *Node) ID() uint64 { return n.id }

// Report drains the unreported hits and sends them, to every peer or
// through the relays (package relay); a period without hits sends a
// heartbeat to every peer. A relay also passes its aggregate on.
func (n *Node) Report(now time.Time) error {
	n.reportMu.Lock()
	defer n.reportMu.Unlock()
	start := time.Now()
	n.configure(&n.enc)
	// Under warm start's lock, so that no level is exported between the
	// drain and the answers taking in what peers know from now on: the
	// hits sent to every peer, and those a relay's aggregate carries
	// back (hits sent to relays stay the node's own until then).
	n.warm.Lock()
	n.hits = n.cfg.Drain(n.hits[:0])
	plain, stated := splitStated(n.hits)
	viaRelays, relayed, err := n.relay.Send(now, plain)
	n.enc.Relayed = relayed
	if !viaRelays {
		n.warm.Known(n.hits, true)
		err = n.broadcast(now, n.hits)
	} else if len(stated) > 0 {
		// Relays sum hits per tag, not per limit: hits under limits
		// callers stated go to every peer directly.
		n.warm.Known(stated, true)
		err = n.broadcast(now, stated)
	}
	if ferr := n.relay.Forward(now); err == nil {
		err = ferr
	}
	n.warm.Unlock()
	n.mu.Lock()
	n.stats.LastReport = now
	n.stats.LastReportDuration = time.Since(start)
	n.mu.Unlock()
	n.advertise(now)
	n.sendTop(now, n.hits)
	n.askRepairs(now)
	if len(n.hits) > 4096 {
		n.hits = nil // do not keep a flood's worth of memory
	}
	if err != nil {
		return fmt.Errorf("gossip: sending report: %w", err)
	}
	return nil
}

// splitStated reorders hits so that those under the tag's policy come
// first, and returns them and those under limits callers stated.
func splitStated(hits []Hit) (plain, stated []Hit) {
	i := 0
	for j := range hits {
		if hits[j].Quota.Burst == 0 {
			hits[i], hits[j] = hits[j], hits[i]
			i++
		}
	}
	return hits[:i], hits[i:]
}

// broadcast sends hits to every peer, or a heartbeat when there are none.
// Called with reportMu held.
func (n *Node) broadcast(now time.Time, hits []Hit) error {
	var packets, bytes uint64
	var sendErr error
	send := n.sendOwn(now)
	skipped, err := n.enc.Encode(now, hits, func(pkt []byte) error {
		if err := send(pkt); err != nil {
			sendErr = err
			return nil // the other datagrams may still get through
		}
		packets++
		bytes += uint64(len(pkt))
		return nil
	})
	n.countSent(packets, bytes, len(hits)-skipped, sendErr != nil)
	n.mu.Lock()
	n.stats.SkippedTags += uint64(skipped)
	n.mu.Unlock()
	if err == nil {
		err = sendErr
	}
	return err
}

// silentAfter is the silence timeout now.
func (n *Node) silentAfter() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg.SilentAfter
}

// Receive checks one datagram and applies its hits if it is a new one
// from a peer.
//
// A datagram is applied at most once. The sequence window drops a
// duplicate or replay from a peer the node tracks. Two more rules cover
// the peers it does not track: a datagram sent before the node started
// (Config.Since) is stale, so a restarted node never applies what its
// former self may have applied; and one sent longer ago than the node
// remembers silent peers (100 silence timeouts) is stale too, so a
// forgotten peer's datagrams cannot be replayed (the first rule does not
// apply to answers to this node's own snapshot request, which name this
// start's node id). Both compare the sender's
// clock with ours: a peer whose clock is behind by d loses its datagrams
// for the first d after we start, which is why clocks should be synced.
func (n *Node) Receive(p transport.Packet) {
	n.mu.Lock()
	key, ours := n.cfg.Key, n.cfg.Fingerprint
	n.mu.Unlock()
	msg, err := wire.Decode(p.Data, key)
	n.mu.Lock()
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrAuth):
			n.stats.DroppedAuth++
			if p.At.Sub(n.authWarned) >= time.Minute || n.authWarned.IsZero() {
				n.authWarned = p.At
				defer n.log.Warn("gossip: dropping reports without a valid signature (logged at most once a minute)",
					"peer", p.From, "dropped", n.stats.DroppedAuth)
			}
		case errors.Is(err, wire.ErrVersion):
			n.stats.DroppedVersion++
		default:
			n.stats.DroppedMalformed++
		}
		n.mu.Unlock()
		return
	}
	if msg.Node == n.id {
		n.stats.Own++
		n.mu.Unlock()
		if d := n.cfg.Discovery; d != nil && p.Unicast && key != nil {
			d.Self(p.From)
		}
		return
	}
	// An answer to this node's own snapshot request is exempt from Since:
	// it names this start's node id, so no former self applied it, and
	// the answering peer's clock or a tick it stamped the answer with may
	// well be a little behind the moment this node started.
	mine := msg.Type == wire.MsgSnapshot && msg.Snapshot != nil && msg.Snapshot.To == n.id
	if (msg.Sent.Before(n.cfg.Since) && !mine) || p.At.Sub(msg.Sent) > 100*n.cfg.SilentAfter {
		n.stats.DroppedStale++
		n.mu.Unlock()
		return
	}
	if msg.Type == wire.MsgRepair {
		// A request to send again: asking twice only asks again.
		n.mu.Unlock()
		n.receiveRepair(msg, p)
		return
	}
	if msg.Type == wire.MsgSnapshot {
		// Answers to one node number their own sequence: package warm.
		n.mu.Unlock()
		n.warm.ReceiveAnswer(msg, p)
		return
	}
	if msg.Type == wire.MsgToRelay || msg.Type == wire.MsgCrossing {
		// Streams to one address number their own sequence: package relay.
		n.mu.Unlock()
		n.relay.ReceiveRelayed(msg, p)
		return
	}
	pr, isNew := n.peers.For(msg.Node, p.From, p.At)
	split := !isNew && peer.Split(pr.Info.LastHeard, p.At, n.cfg.SilentAfter)
	if !pr.Accept(msg.Seq, p.At) {
		n.stats.DroppedDuplicate++
		n.mu.Unlock()
		return
	}
	pr.Info.Packets++
	for _, h := range msg.Hits {
		pr.Info.Hits += uint64(h.Count)
	}
	pr.Info.Addr = p.From
	pr.Info.LastHeard = p.At
	pr.Info.FingerprintMatch = msg.Fingerprint == ours
	pr.Info.Relayed = msg.Relayed
	pr.Info.Delay = max(0, p.At.Sub(msg.Sent))
	wasSilent := pr.Info.Silent
	pr.Info.Silent = false
	if split {
		pr.ForgetHoles() // a split's, not a loss: repair.go
	}
	warn := !pr.Info.FingerprintMatch && !pr.Warned
	if !pr.Info.FingerprintMatch {
		n.stats.FingerprintMismatch++
		pr.Warned = true
	}
	n.stats.PacketsReceived++
	n.stats.BytesReceived += uint64(len(p.Data))
	n.stats.TagsReceived += uint64(len(msg.Hits))
	n.mu.Unlock()

	attrs := []any{"peer", p.From, "node", peer.Name(msg.Node)}
	if isNew {
		n.log.Info("peer joined", attrs...)
	} else if wasSilent {
		n.log.Info("peer heard again", attrs...)
	}
	if warn {
		n.log.Warn("peer's policies differ from ours: the cluster will not hold one rate",
			append(attrs, "their_fingerprint", fmt.Sprintf("%016x", msg.Fingerprint), "ours", fmt.Sprintf("%016x", ours))...)
	}
	if (msg.Type == wire.MsgHits || msg.Type == wire.MsgStatedHits) && len(msg.Hits) > 0 {
		n.applyHits(msg.Node, p.At, msg.Hits)
	}
	if msg.Type == wire.MsgAggregate {
		n.relay.ReceiveAggregate(msg, p)
	}
	n.discover(msg, p, key != nil)
	if msg.Type == wire.MsgTop {
		n.receiveTop(msg, p)
	}
	if msg.Type == wire.MsgSnapshotRequest {
		n.warm.ReceiveRequest(msg, p)
	}
	n.heardMember(msg, p.At, isNew || wasSilent)
}

// applyHits applies a peer's reported hits. While an answer to that peer
// is under way, they are applied under warm start's lock, which records
// them: no level is exported between the table taking the hits and the
// answer's record of them.
func (n *Node) applyHits(from uint64, at time.Time, hits []Hit) {
	n.warm.Lock()
	if !n.warm.Theirs(from, hits) {
		n.warm.Unlock()
		n.cfg.Apply(at, hits)
		return
	}
	n.cfg.Apply(at, hits)
	n.warm.Unlock()
}

// checkSilence logs peers that went unheard for the silence timeout, once
// each, and forgets peers unheard for a hundred times as long.
func (n *Node) checkSilence(now time.Time) {
	n.mu.Lock()
	var silent []PeerInfo
	for id, pr := range n.peers {
		quiet := now.Sub(pr.Info.LastHeard)
		if quiet > 100*n.cfg.SilentAfter {
			delete(n.peers, id)
			continue
		}
		if quiet > n.cfg.SilentAfter && !pr.Info.Silent {
			pr.Info.Silent = true
			if !pr.Info.Relayed { // one that reports through relays falls silent when it hears them
				silent = append(silent, pr.Info)
			}
		}
	}
	n.mu.Unlock()
	n.relay.Check(now)
	for _, p := range silent {
		n.log.Warn("peer went silent", "peer", p.Addr, "node", peer.Name(p.Node), "last_heard", p.LastHeard.Format(time.RFC3339))
	}
}

// Peers returns the peers heard, ordered by node id.
func (n *Node) Peers() []PeerInfo {
	n.mu.Lock()
	out := n.peers.Sorted()
	n.mu.Unlock()
	return n.markMembers(n.relay.MarkPeers(out))
}

// Warm asks the peers for their table at now, and merges their answers
// as they arrive (package warm). A node without Config.Merge does nothing;
// a second call does nothing.
func (n *Node) Warm(now time.Time) error { return n.warm.Warm(now) }

// Pace sends the next datagrams of the snapshot answers under way and
// follows the node's own warm start (warm.Warm.Pace); it reports whether
// there is more to do. The running loop calls it; tests on a fake clock
// call it by hand.
func (n *Node) Pace(now time.Time) bool { return n.warm.Pace(now) }

// WarmStats returns the node's warm start counters.
func (n *Node) WarmStats() warm.Stats { return n.warm.Stats() }

// SetRelay changes the relaying mode and hold-back from the next report
// on (a reload). The link to other segments stays the one NewNode got; a
// relay that stops serving drops the sums it held.
func (n *Node) SetRelay(cfg relay.Config) { n.relay.Set(cfg) }
