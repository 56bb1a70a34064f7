package client

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/inproc"
	"github.com/dthrottle/dthrottle/rlheader"
)

// Deciding in process: when the daemon listens on a Unix socket and shares
// its table (docs/shared-table.md), a Client maps the table and decides a
// tag the table holds in its own address space, with no round trip and no
// system call; a tag the table does not hold yet is asked over the socket
// as before (the daemon then inserts it). The Client attaches in the
// background, after a query the daemon answered, at most every
// inproc.RetryEvery (every 10 s while the daemon shares nothing); when the daemon leaves the table (it stopped, or
// has not beaten in it for a second) queries go back to the socket, with
// its timeouts, backoff and fail mode, and the next answer attaches
// again.

// Path says how a Decision was made.
type Path uint8

const (
	// Asked: the daemon answered over the socket.
	Asked Path = iota
	// InProcess: decided in this process from the daemon's shared table
	// (or an empty tag, served without asking).
	InProcess
	// Failed: the daemon could not answer and the fail mode did, or the
	// tag was invalid and refused.
	Failed
)

// String returns "asked", "in process" or "failed".
func (p Path) String() string {
	return [...]string{"asked", "in process", "failed"}[min(p, Failed)]
}

// Decision is Check's answer, with what a decision made in process knows
// of the tag's bucket for the headers of an HTTP answer.
type Decision struct {
	OK   bool
	Path Path
	// The bucket, when Path is InProcess and a limit policy decided
	// (Limit > 0): the policy's burst, the whole tokens left after the
	// query, on a refusal the time until a token is earned, and the time
	// until the bucket is full again.
	Limit      int
	Remaining  int
	RetryAfter time.Duration
	Reset      time.Duration

	policy int
	m      *inproc.Mapping
}

// Policy returns the policy that decided, as the daemon's table states it
// (name, burst, rate, action), when Path is InProcess; ok is false
// otherwise, or while the daemon rewrites its policies.
func (d Decision) Policy() (p bucket.Policy, ok bool) {
	if d.m == nil {
		return bucket.Policy{}, false
	}
	return d.m.Policy(d.policy)
}

// SetHeaders sets the headers of the answer to a refused request as the
// daemon's HTTP endpoint would: when a limit policy refused in process,
// Retry-After (until a token is earned), RateLimit-Policy and RateLimit;
// when the daemon answered over the socket, or the fail mode did,
// Retry-After: 1 (a bucket refilling at one token per second or faster
// has a token again by then); when a deny policy refused, none. On a
// served request it sets RateLimit-Policy and RateLimit when known.
func (d Decision) SetHeaders(h http.Header) {
	if d.Path != InProcess {
		if !d.OK {
			h[rlheader.FieldRetryAfter] = []string{"1"}
		}
		return
	}
	p, ok := d.Policy()
	if !ok || d.Limit == 0 || p.Action != bucket.Limit {
		return
	}
	var b [128]byte
	h[rlheader.FieldPolicy] = []string{string(rlheader.AppendPolicy(b[:0], p))}
	h[rlheader.FieldRateLimit] = []string{string(rlheader.AppendRateLimit(b[:0], bucket.Verdict{Policy: p, Tokens: float64(d.Remaining), Full: d.Reset}))}
	if !d.OK {
		h[rlheader.FieldRetryAfter] = []string{strconv.FormatInt(max(rlheader.CeilSeconds(d.RetryAfter), 1), 10)}
	}
}

// sharing is a Client's hold on the daemon's shared table.
type sharing struct {
	on        bool // the Client may decide in process (a Unix socket, not NoShare)
	cur       atomic.Pointer[inproc.Mapping]
	next      atomic.Int64 // no attach before this (Unix ns)
	attaching atomic.Bool
	mu        sync.Mutex // orders starting an attach with Close
}

const (
	// attachTimeout bounds one attach: a connect, one exchange and two
	// maps.
	attachTimeout = time.Second
	// notSharedRetry is the pause before attaching again to a daemon that
	// answered an attach sharing nothing.
	notSharedRetry = 10 * time.Second
)

// decideShared decides tag in process: ok is false when it must be asked.
func (c *Client) decideShared(tag string) (d Decision, ok bool) {
	m := c.sharing.cur.Load()
	if m == nil {
		return d, false
	}
	key := tag
	if key[len(key)-1] == '\r' { // as the daemon reads it
		key = key[:len(key)-1]
	}
	bd := m.Decide(time.Now().UnixNano(), unsafe.Slice(unsafe.StringData(key), len(key)))
	switch bd.Code {
	case bucket.OK, bucket.No:
	case bucket.Left:
		c.sharing.cur.CompareAndSwap(m, nil)
		return d, false
	default:
		return d, false
	}
	d = Decision{OK: bd.Code == bucket.OK, Path: InProcess, Limit: int(bd.Limit),
		Remaining: int(bd.Remaining), RetryAfter: time.Duration(bd.RetryAfter), Reset: time.Duration(bd.Reset),
		policy: bd.Policy, m: m}
	c.stats.inProcess.Add(1)
	if d.OK {
		c.stats.ok.Add(1)
	} else {
		c.stats.no.Add(1)
	}
	return d, true
}

// attachSoon attaches in the background, unless attached, attaching, or
// an attempt was made within inproc.RetryEvery.
func (c *Client) attachSoon() {
	s := &c.sharing
	now := time.Now().UnixNano()
	if !s.on || s.cur.Load() != nil || now < s.next.Load() || !s.attaching.CompareAndSwap(false, true) {
		return
	}
	s.next.Store(now + int64(inproc.RetryEvery))
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed.Load() {
		s.attaching.Store(false)
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer s.attaching.Store(false)
		m, err := inproc.Attach(c.address, attachTimeout)
		if err == nil && m == nil {
			// The daemon answered, sharing nothing (share_table = false):
			// look again now and then, in case a restart turns it on.
			s.next.Store(time.Now().Add(notSharedRetry).UnixNano())
		}
		if err != nil || m == nil || c.closed.Load() {
			return
		}
		s.cur.Store(m)
		c.stats.attaches.Add(1)
	}()
}
