// Package hapeers makes dthrottled a peer of HAProxy's stick tables: it
// speaks HAProxy's peers protocol (doc/peers-v2.0.txt in HAProxy's
// sources; versions 2.0 and 2.1, HAProxy 2.6 speaks 2.1) as a remote
// peer of HAProxy's "peers" section. HAProxy connects and pushes the
// entries of its stick tables as they change; for each table it follows,
// dthrottled turns each entry's counter increase (gpc0, gpc1, gpc(0) or
// http_req_cnt, counting the requests HAProxy served) into hits of the
// entry's tag, charged to the table (into debt if need be, and reported
// to dthrottled's peers like every hit), and pushes back into the same
// entry the gpt0 flag HAProxy's ACLs read: while the tag's bucket holds
// less than a token, the Unix second (rounded up) at which it will hold
// one, for Retry-After; 0 again once it holds one. HAProxy then decides
// every request at the speed of its own stick table, on the count of the
// whole fleet.
//
// The package owns the codec (codec.go), one HAProxy process's connection
// with its handshake, resync, acks and heartbeats (session.go), and the
// mapping of entries to tags and hits, bounded by MaxKeys (hits.go). It
// charges and checks through a [Table], which *bucket.Table is.
// Accepting connections, their limit and shutdown are package serve's.
package hapeers

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// Defaults for the zero fields of Config.
const (
	DefaultName          = "dthrottled"
	DefaultMaxKeys       = 1000000
	DefaultCheckInterval = 20 * time.Millisecond
	// checkBudget is the most entries a round of checks asks the table
	// about: a round over a million entries takes 100 intervals.
	checkBudget = 10000
	// defaultIdle is how long an entry is kept without news when no
	// table has an expire.
	defaultIdle = 10 * time.Minute
)

// Config configures a Server. The zero Config is usable with Tables set.
type Config struct {
	// Name is the name HAProxy's peers section gives dthrottled; a hello
	// for another name is refused (503). Default DefaultName.
	Name string
	// Peers are the HAProxy peer names accepted (their localpeer); empty
	// accepts any.
	Peers []string
	// Tables are the stick tables followed, by name ("web"; a table of a
	// peers section may be given with or without its leading "/").
	Tables []string
	// Counter is the data type counting the requests HAProxy served, one
	// of Counters; default "gpc0".
	Counter string
	// Prefix is put before each key to make its tag.
	Prefix string
	// MaxKeys bounds the entries remembered, and the flags waiting to be
	// sent on each connection. Default DefaultMaxKeys.
	MaxKeys int
	// CheckInterval is how often the entries are checked against the
	// table, for hits from elsewhere (peers, other ways in) and for
	// buckets that refilled. Default DefaultCheckInterval.
	CheckInterval time.Duration
	// MaxConns is the most connections at once; 0 or less: no limit.
	MaxConns int
	Clock    func() time.Time // default time.Now
	Logger   *slog.Logger     // default: discard
}

// Server is the peer HAProxy connects to. Make one with New (the zero
// Server is not usable) and serve it with its embedded serve.Server. It
// is safe for concurrent use.
type Server struct {
	*serve.Server
	cfg  Config
	now  func() time.Time
	log  *slog.Logger
	book *book

	stats counters

	mu      sync.Mutex
	sources map[string]uint64 // "name pid": id
	nextSrc uint64
	running int // connections served; the checks run while > 0
	stop    chan struct{}
	warned  map[string]bool
}

// counters are the Server's, read by Stats.
type counters struct {
	messages, updates, hits, firstSeen, badKeys, untracked atomic.Uint64
	pushes, pushesDropped, refusedTables, badHellos        atomic.Uint64
	badMessages, resyncs, checks                           atomic.Uint64
}

// New returns a Server charging and checking t. It serves nothing until
// Serve.
func New(t Table, cfg Config) *Server {
	cfg.Name = cmp.Or(cfg.Name, DefaultName)
	cfg.Counter = cmp.Or(cfg.Counter, "gpc0")
	cfg.MaxKeys = cmp.Or(cfg.MaxKeys, DefaultMaxKeys)
	cfg.CheckInterval = cmp.Or(cfg.CheckInterval, DefaultCheckInterval)
	s := &Server{cfg: cfg, now: cfg.Clock, log: cfg.Logger, sources: make(map[string]uint64), warned: make(map[string]bool)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.book = newBook(t, cfg, &s.stats)
	s.Server = serve.New(serve.HandlerFunc(s.serveConn), serve.Config{Name: "haproxy peers", MaxConns: cfg.MaxConns, Logger: s.log})
	return s
}

// serveConn serves one HAProxy process.
func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	stop := serve.InterruptReads(ctx, nc)
	defer stop()
	s.startChecks()
	defer s.stopChecks()
	c := &session{s: s, nc: nc, remote: make(map[uint64]int), defs: make(map[uint64]*Definition),
		lastGet: make(map[uint64]uint32), pending: make(map[push]uint32), sent: make(map[uint64]uint32), batch: make(map[string]int), wake: make(chan struct{}, 1)}
	c.serve(ctx)
}

// knownPeer reports whether name may connect.
func (s *Server) knownPeer(name string) bool {
	return len(s.cfg.Peers) == 0 || slices.Contains(s.cfg.Peers, name)
}

// sourceOf returns the id of the HAProxy process name, pid: the same for
// a process that connects again, another for a new one (a reload).
func (s *Server) sourceOf(name string, pid int) uint64 {
	k := name + " " + strconv.Itoa(pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.sources[k]; ok {
		return id
	}
	if len(s.sources) >= 1024 {
		clear(s.sources) // a process this old has no entries left worth its count
	}
	s.nextSrc++
	s.sources[k] = s.nextSrc
	return s.nextSrc
}

// warnOnce logs msg once per key.
func (s *Server) warnOnce(key, msg string, args ...any) {
	s.mu.Lock()
	seen := s.warned[key]
	if !seen && len(s.warned) < 1024 {
		s.warned[key] = true
	}
	s.mu.Unlock()
	if !seen {
		s.log.Warn(msg, args...)
	}
}

// startChecks runs the rounds of checks while connections are served.
func (s *Server) startChecks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running++
	if s.running > 1 {
		return
	}
	stop := make(chan struct{})
	s.stop = stop
	go func() {
		t := time.NewTicker(s.cfg.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n := s.book.round(s.now(), checkBudget, s.idle())
				s.stats.checks.Add(uint64(n))
			}
		}
	}()
}

func (s *Server) stopChecks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running--; s.running == 0 {
		close(s.stop)
	}
}

// idle is how long an entry is kept without news from HAProxy: the
// longest expire among the tables, defaultIdle without one.
func (s *Server) idle() time.Duration {
	ms := s.book.maxExpire()
	if ms == 0 {
		return defaultIdle
	}
	return time.Duration(ms) * time.Millisecond
}

// Stats are a Server's counters.
type Stats struct {
	serve.Stats
	Messages      uint64 // messages read from HAProxy
	Updates       uint64 // entry updates taken
	Hits          uint64 // hits charged from the counters' increases
	FirstSeen     uint64 // updates of an entry not known from that HAProxy process (charged at most a burst)
	BadKeys       uint64 // keys that are no tag (empty, a newline or NUL), not charged
	Untracked     uint64 // entries not remembered: the book was full (max_keys)
	Pushes        uint64 // flag changes pushed to HAProxy
	PushesDropped uint64 // flags not queued: a connection had max_keys waiting
	RefusedTables uint64 // table definitions not followed: not configured, or without the counter or gpt0
	BadHellos     uint64 // connections refused at the hello
	BadMessages   uint64 // connections ended on a malformed message
	Resyncs       uint64 // resync requests answered
	Checks        uint64 // entries checked against the table by the rounds
	Keys          int    // entries remembered now
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{Stats: s.Server.Stats(), Messages: c.messages.Load(), Updates: c.updates.Load(), Hits: c.hits.Load(),
		FirstSeen: c.firstSeen.Load(), BadKeys: c.badKeys.Load(), Untracked: c.untracked.Load(), Pushes: c.pushes.Load(),
		PushesDropped: c.pushesDropped.Load(), RefusedTables: c.refusedTables.Load(), BadHellos: c.badHellos.Load(),
		BadMessages: c.badMessages.Load(), Resyncs: c.resyncs.Load(), Checks: c.checks.Load(), Keys: s.book.size()}
}
