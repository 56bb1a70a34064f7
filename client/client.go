package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero fields of a Config.
const (
	DefaultTimeout    = 5 * time.Millisecond
	DefaultConns      = 1
	DefaultMinBackoff = 10 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// MaxTagLen is the longest tag Allow sends: the daemon closes a connection
// whose request line is longer (64 KiB before the '\n').
const MaxTagLen = 64 << 10

var (
	// ErrTimeout: the daemon did not answer within Config.Timeout.
	ErrTimeout = errors.New("client: query timed out")
	// ErrBackoff: the query was not sent, because an earlier one failed
	// recently; the answer is the fail mode's.
	ErrBackoff = errors.New("client: backing off after a failure")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrInvalidTag: the tag holds a '\n' or is longer than MaxTagLen. It
	// is refused whatever the fail mode: such a tag could only break the
	// stream, and a caller whose keys come from clients must not let them
	// escape the limit that way.
	ErrInvalidTag = errors.New("client: tag holds a newline or is longer than 64 KiB")
)

// FailMode is the answer Allow gives when the daemon cannot answer. The
// zero value is FailOpen.
type FailMode int

const (
	// FailOpen serves the request when the daemon cannot answer.
	FailOpen FailMode = iota
	// FailClosed refuses the request when the daemon cannot answer.
	FailClosed
)

// String returns "open" or "closed".
func (m FailMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Config configures a Client. Only Address is required: every zero field
// means its default.
type Config struct {
	// Network is "unix" (the default when empty) or "tcp".
	Network string
	// Address is the socket path ("unix") or host:port ("tcp").
	Address string
	// Timeout bounds each query, dialing included. 0 means DefaultTimeout
	// (5 ms): the daemon answers in microseconds, so a query that takes
	// longer means trouble, and the caller should not wait for it.
	Timeout time.Duration
	// FailMode is the answer when the daemon cannot answer. The zero value
	// is FailOpen.
	FailMode FailMode
	// Conns is the number of connections queries are spread over, round
	// robin. 0 means DefaultConns (1): one connection carries any number of
	// pipelined queries, and the fewer the connections the larger each
	// write and read (on a 2-core machine, 64 goroutines per core reach
	// about 1.6 times the queries per second on one connection as on two).
	Conns int
	// MinBackoff is the first pause after a failure; it doubles with each
	// consecutive failure up to MaxBackoff. 0 means DefaultMinBackoff
	// (10 ms) and DefaultMaxBackoff (5 s).
	MinBackoff, MaxBackoff time.Duration
	// HTTP is the daemon's HTTP decision endpoint (its http.listen):
	// "host:port", or "unix:/path". AllowLimit asks there, the one way to
	// state a limit per query; "" leaves AllowLimit to the fail mode
	// (ErrNoHTTP). Timeout, FailMode and the backoff apply as to Allow.
	HTTP string
	// NoShare asks every query over the socket even when the daemon
	// shares its table. By default a Client on a Unix socket decides in
	// process from the shared table when the daemon offers it (see
	// Decision and Path).
	NoShare bool
}

// Stats is a snapshot of a Client's counters, all since New. Every Allow
// or AllowLimit call that sent a query counts once in OK, NO, Timeouts,
// Errors, Canceled or BadLimits; every answer made without the daemon
// counts once in FailOpen or FailClosed.
type Stats struct {
	OK, NO     uint64 // answers from the daemon, or from its table in process
	Timeouts   uint64 // queries unanswered within Timeout (including those queued behind one)
	Errors     uint64 // queries that failed otherwise: dial, I/O, a closed connection, a bad reply
	Canceled   uint64 // queries whose context ended before the answer
	BackedOff  uint64 // queries answered at once, unsent, during a backoff or after Close
	Invalid    uint64 // tags refused by ErrInvalidTag
	BadLimits  uint64 // stated limits the daemon refused (*LimitError): requests refused
	FailOpen   uint64 // requests served because the daemon could not answer
	FailClosed uint64 // requests refused because the daemon could not answer
	Dials      uint64 // connection attempts
	Reconnects uint64 // successful dials that replaced a lost connection
	InProcess  uint64 // of OK and NO, the answers decided in process from the shared table
	Attaches   uint64 // successful attaches to the shared table (a connection each, not in Dials)
	// AttachErrors counts attaches that failed (the table mapped nothing,
	// the daemon answered nothing, or handed files that are not its
	// table); a daemon that shares nothing is not an error.
	AttachErrors uint64
}

// counters are a Client's statistics, updated atomically.
type counters struct {
	ok, no, timeouts, errors, canceled, backedOff, invalid atomic.Uint64
	failOpen, failClosed, dials, reconnects                atomic.Uint64
	inProcess, attaches, attachErrors, badLimits           atomic.Uint64
}

// Client asks one dthrottled whether requests should be served. It is safe
// for concurrent use by many goroutines. The zero value is not usable: call
// New. Close it to release its connections and goroutines.
type Client struct {
	network, address string
	timeout          time.Duration
	failOK           bool // the answer when the daemon cannot answer
	health           health
	http             *httpAsker // nil: no HTTP endpoint (AllowLimit)
	httpHealth       health     // the HTTP endpoint's backoff
	slots            []slot
	next             atomic.Uint32
	stats            counters
	sharing          sharing

	closed  atomic.Bool
	wg      sync.WaitGroup // connections' reader and writer goroutines
	waiters waiterPool     // the queries' waiters, recycled

	// dial connects to the daemon by the deadline: dialNet, or in tests a
	// dial on the in-memory network.
	dial func(ctx context.Context, network, address string, deadline time.Time) (net.Conn, error)
}

// slot holds one of the pool's connections, dialed on demand.
type slot struct {
	cur atomic.Pointer[conn] // nil until dialed, and again once the connection failed
	mu  sync.Mutex           // serializes dials
	had bool                 // a connection was established before; guarded by mu
}

// New returns a Client for the daemon at cfg.Address. It does not dial:
// the first query does, so a daemon absent at start is not an error, only
// a fail-mode answer. New returns an error for a bad Config.
func New(cfg Config) (*Client, error) {
	if cfg.Network == "" {
		cfg.Network = "unix"
	}
	switch cfg.Network {
	case "unix", "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("client: network %q: must be unix or tcp", cfg.Network)
	}
	if cfg.Address == "" {
		return nil, errors.New("client: no address")
	}
	if cfg.Timeout < 0 || cfg.Conns < 0 || cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 {
		return nil, errors.New("client: negative timeout, conns or backoff")
	}
	if cfg.FailMode != FailOpen && cfg.FailMode != FailClosed {
		return nil, fmt.Errorf("client: unknown fail mode %d", cfg.FailMode)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Conns == 0 {
		cfg.Conns = DefaultConns
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, fmt.Errorf("client: max backoff %v below min backoff %v", cfg.MaxBackoff, cfg.MinBackoff)
	}
	asker, err := newHTTPAsker(cfg.HTTP, cfg.Conns)
	if err != nil {
		return nil, err
	}
	c := &Client{
		network:    cfg.Network,
		address:    cfg.Address,
		dial:       dialNet,
		timeout:    cfg.Timeout,
		failOK:     cfg.FailMode == FailOpen,
		health:     health{min: cfg.MinBackoff, max: cfg.MaxBackoff, hold: cfg.Timeout, now: time.Now},
		http:       asker,
		httpHealth: health{min: cfg.MinBackoff, max: cfg.MaxBackoff, hold: cfg.Timeout, now: time.Now},
		slots:      make([]slot, cfg.Conns),
	}
	c.sharing.on = cfg.Network == "unix" && !cfg.NoShare
	return c, nil
}

// Allow asks the daemon whether a request with this tag should be served:
// true for OK, false for NO. An empty tag is served without asking (the
// daemon answers OK to it, unaccounted).
//
// When the daemon cannot answer (timeout, no daemon, broken connection,
// backoff, ctx done, Client closed), Allow returns the fail mode's answer
// (true for FailOpen) and a non-nil error saying why: the answer is safe to
// use as it is. The one exception is an invalid tag (ErrInvalidTag), which
// is always refused.
func (c *Client) Allow(ctx context.Context, tag string) (bool, error) {
	d, err := c.Check(ctx, tag)
	return d.OK, err
}

// Check is Allow, answering with the Decision: how it was made and, when
// made in process, what it knows of the tag's bucket for the headers.
func (c *Client) Check(ctx context.Context, tag string) (Decision, error) {
	if tag == "" {
		return Decision{OK: true, Path: InProcess}, nil
	}
	if len(tag) > MaxTagLen || strings.IndexByte(tag, '\n') >= 0 {
		c.stats.invalid.Add(1)
		return Decision{Path: Failed}, ErrInvalidTag
	}
	if !c.closed.Load() {
		if d, ok := c.decideShared(tag); ok {
			return d, nil
		}
	}
	ok, err := c.ask(ctx, tag)
	if err != nil {
		return Decision{OK: ok, Path: Failed}, err
	}
	c.attachSoon()
	return Decision{OK: ok, Path: Asked}, nil
}

// ask asks the daemon over the socket.
func (c *Client) ask(ctx context.Context, tag string) (bool, error) {
	if c.closed.Load() {
		c.stats.backedOff.Add(1)
		return c.failed(), ErrClosed
	}
	if err := ctx.Err(); err != nil {
		c.stats.canceled.Add(1)
		return c.failed(), err
	}
	gen, ok := c.health.admit()
	if !ok {
		c.stats.backedOff.Add(1)
		return c.failed(), ErrBackoff
	}
	start := time.Now()
	deadline := start.Add(c.timeout)
	cn, err := c.conn(ctx, deadline)
	if err != nil {
		return c.fail(ctx, &c.health, gen, err)
	}
	w := c.waiters.get()
	w.sent = start
	if err := cn.send(tag, w); err != nil {
		w.recycle()
		return c.fail(ctx, &c.health, gen, err)
	}
	w.timer.Reset(time.Until(deadline))
	var r reply
	select {
	case r = <-w.ch:
		w.timer.Stop()
	case <-w.timer.C:
		if !w.abandon() {
			r = <-w.ch // the reply won the race: use it
			break
		}
		// Back off first, so that no query is admitted onto a fresh
		// connection meanwhile; then fail those queued behind this one.
		c.stats.timeouts.Add(1)
		c.health.fail(gen)
		cn.fail(ErrTimeout)
		return c.failed(), ErrTimeout
	case <-ctx.Done():
		w.timer.Stop()
		if !w.abandon() {
			r = <-w.ch
			break
		}
		// The reply will still come: the reader drops it. But if the
		// oldest query on this connection has waited longer than Timeout,
		// the daemon is not answering, whoever gives up first: callers
		// whose contexts all end before Timeout must not hide a hung
		// daemon (and pile up queries behind it).
		c.stats.canceled.Add(1)
		if cn.oldestBefore(time.Now().Add(-c.timeout)) {
			c.stats.timeouts.Add(1)
			c.health.fail(gen)
			cn.fail(ErrTimeout)
		}
		return c.failed(), ctx.Err()
	}
	w.recycle()
	if r.err != nil {
		return c.fail(ctx, &c.health, gen, r.err)
	}
	if r.ok {
		c.stats.ok.Add(1)
	} else {
		c.stats.no.Add(1)
	}
	c.health.succeed(gen)
	return r.ok, nil
}

// fail counts a query that got no answer, starts or extends the backoff
// h (the socket's or the HTTP endpoint's) unless the caller's context
// ended, and returns the fail mode's answer.
func (c *Client) fail(ctx context.Context, h *health, gen uint64, err error) (bool, error) {
	switch {
	case errors.Is(err, ErrTimeout) || isTimeout(err) && ctx.Err() == nil:
		c.stats.timeouts.Add(1)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// A dial interrupted by the caller's context says nothing about
		// the daemon.
		c.stats.canceled.Add(1)
		return c.failed(), err
	case errors.Is(err, ErrClosed):
		c.stats.errors.Add(1)
		return c.failed(), err
	default:
		c.stats.errors.Add(1)
	}
	h.fail(gen)
	return c.failed(), err
}

// failed counts and returns the fail mode's answer.
func (c *Client) failed() bool {
	if c.failOK {
		c.stats.failOpen.Add(1)
	} else {
		c.stats.failClosed.Add(1)
	}
	return c.failOK
}

// conn returns a live connection from the next slot, dialing it if needed.
func (c *Client) conn(ctx context.Context, deadline time.Time) (*conn, error) {
	s := &c.slots[(c.next.Add(1)-1)%uint32(len(c.slots))]
	if cn := s.cur.Load(); cn != nil {
		return cn, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cn := s.cur.Load(); cn != nil {
		return cn, nil
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	c.stats.dials.Add(1)
	nc, err := c.dial(ctx, c.network, c.address, deadline)
	if err != nil {
		return nil, fmt.Errorf("client: dialing %s %s: %w", c.network, c.address, err)
	}
	if s.had {
		c.stats.reconnects.Add(1)
	}
	s.had = true
	cn := newConn(nc, s, &c.wg)
	s.cur.Store(cn)
	return cn, nil
}

// dialNet dials address on network by deadline.
func dialNet(ctx context.Context, network, address string, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	return d.DialContext(ctx, network, address)
}

// FailMode returns the answer given when the daemon cannot answer.
func (c *Client) FailMode() FailMode {
	if c.failOK {
		return FailOpen
	}
	return FailClosed
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		OK: s.ok.Load(), NO: s.no.Load(),
		Timeouts: s.timeouts.Load(), Errors: s.errors.Load(), Canceled: s.canceled.Load(),
		BackedOff: s.backedOff.Load(), Invalid: s.invalid.Load(),
		FailOpen: s.failOpen.Load(), FailClosed: s.failClosed.Load(),
		Dials: s.dials.Load(), Reconnects: s.reconnects.Load(),
		InProcess: s.inProcess.Load(), Attaches: s.attaches.Load(), AttachErrors: s.attachErrors.Load(),
		BadLimits: s.badLimits.Load(),
	}
}

// Close closes the connections, fails the queries waiting on them and waits
// for the connections' goroutines to end. Allow after Close answers with the
// fail mode and ErrClosed. Close is safe to call more than once.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.sharing.mu.Lock()
	c.sharing.cur.Store(nil)
	c.sharing.mu.Unlock()
	for i := range c.slots {
		s := &c.slots[i]
		s.mu.Lock()
		if cn := s.cur.Load(); cn != nil {
			cn.fail(ErrClosed)
		}
		s.mu.Unlock()
	}
	c.wg.Wait()
	if c.http != nil {
		c.http.tr.CloseIdleConnections()
	}
	return nil
}

// isTimeout reports whether err is a network timeout, such as a dial that
// outlasted Config.Timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
