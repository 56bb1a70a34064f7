package client

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/inproc"
	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
)

// Deciding in process: see "Deciding in process" in doc.go.

// Path says how a Decision was made. The zero Path is Failed: a zero
// Decision is a refusal nobody decided.
type Path uint8

const (
	// Failed: the daemon could not answer and the fail mode did, or the
	// tag was invalid and refused.
	Failed Path = iota
	// Asked: the daemon answered over the socket.
	Asked
	// InProcess: decided in this process from the daemon's shared table
	// (or an empty tag, served without asking).
	InProcess
	// AskedHTTP: the daemon's HTTP decision endpoint answered (AllowLimit).
	AskedHTTP
)

// String returns "failed", "asked", "in process" or "asked over http".
func (p Path) String() string {
	return [...]string{"failed", "asked", "in process", "asked over http"}[min(p, AskedHTTP)]
}

// Decision is Check's answer, with what a decision made in process knows
// of the tag's bucket for the headers of an HTTP answer. The zero
// Decision is a refusal by the fail mode.
type Decision struct {
	OK   bool
	Path Path
	// The bucket, when Path is InProcess or AskedHTTP and a limit
	// decided (Limit > 0; 0 for an allow or deny policy, and on the
	// other paths): the burst (of the limit applied, for AllowLimit), the
	// whole tokens left after the query, on a refusal (or a dry run's
	// would-be refusal) the time until a token is earned, and the time
	// until the bucket is full again. Over HTTP the times are whole
	// seconds, rounded up, as the answer's header fields give them.
	Limit      int
	Remaining  int
	RetryAfter time.Duration
	Reset      time.Duration

	bd     bucket.Decision
	m      *inproc.Mapping
	fields [3]string // AskedHTTP: the answer's RateLimit-Policy, RateLimit and Retry-After
}

// Policy returns the policy that decided, as the daemon's table states it
// (name, burst, rate, action, dry run), when Path is InProcess; ok is
// false otherwise, and once the daemon's policies changed since.
func (d Decision) Policy() (p bucket.Policy, ok bool) {
	if d.m == nil {
		return bucket.Policy{}, false
	}
	return d.m.PolicyOf(d.bd)
}

// SetHeaders sets the headers of an HTTP answer to the request as the
// daemon's HTTP endpoint would, as far as the decision knows them:
//
//   - decided in process by a limit policy: on a refusal Retry-After
//     (until a token is earned, at least 1 s), and RateLimit-Policy and
//     RateLimit, served or refused, unless the policies changed since
//     (then the name would not be the deciding policy's);
//     DThrottle-Dry-Run under a dry-run policy ("served", or "refused"
//     for what the limit would have refused);
//   - decided in process by a deny policy: none, as from the endpoint;
//   - asked over HTTP (AllowLimit): the endpoint's own, as it sent them;
//   - asked over the socket, or answered by the fail mode: on a refusal
//     Retry-After: 1 (a bucket refilling at one token per second or
//     faster has a token again by then).
func (d Decision) SetHeaders(h http.Header) {
	if d.Path == AskedHTTP {
		for i, name := range [...]string{rlheader.FieldPolicy, rlheader.FieldRateLimit, rlheader.FieldRetryAfter} {
			if d.fields[i] != "" {
				h[name] = []string{d.fields[i]}
			}
		}
		return
	}
	if d.Path != InProcess {
		if !d.OK {
			h[rlheader.FieldRetryAfter] = []string{"1"}
		}
		return
	}
	if d.Limit == 0 {
		return
	}
	if !d.OK {
		h[rlheader.FieldRetryAfter] = []string{strconv.FormatInt(max(rlheader.CeilSeconds(d.RetryAfter), 1), 10)}
	}
	p, ok := d.Policy()
	if !ok || p.Action != bucket.Limit {
		return
	}
	var b [128]byte
	h[rlheader.FieldPolicy] = []string{string(rlheader.AppendPolicy(b[:0], p))}
	v := bucket.Verdict{Policy: p, Tokens: float64(d.Remaining), Full: d.Reset}
	h[rlheader.FieldRateLimit] = []string{string(rlheader.AppendRateLimit(b[:0], v))}
	if p.DryRun {
		h[rlheader.FieldDryRun] = []string{"served"}
		if d.RetryAfter > 0 {
			h[rlheader.FieldDryRun] = []string{"refused"}
		}
	}
}

// sharing is a Client's hold on the daemon's shared table.
type sharing struct {
	on        bool // the Client may decide in process (a Unix socket, not NoShare)
	cur       atomic.Pointer[inproc.Mapping]
	next      atomic.Int64 // no attach before this (Unix ns)
	attaching atomic.Bool
	mu        sync.Mutex      // orders an attach's start and end with Close
	last      *inproc.Mapping // the last table mapped, reused if handed again; guarded by mu
	pause     time.Duration   // after a failed attach, doubling to notSharedRetry; the attach goroutine's
	attempts  atomic.Uint64   // attaches tried
}

const (
	// attachTimeout bounds one attach: a connect, one exchange and two
	// maps.
	attachTimeout = time.Second
	// notSharedRetry is the pause before attaching again to a daemon that
	// answered an attach sharing nothing, and the longest pause after
	// attaches that failed.
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
	switch m.DecideInto(time.Now().UnixNano(), unsafe.Slice(unsafe.StringData(key), len(key)), &d.bd) {
	case bucket.OK:
		d.OK = true
	case bucket.No:
	case bucket.Left:
		c.sharing.cur.CompareAndSwap(m, nil)
		return Decision{}, false
	default:
		return Decision{}, false
	}
	d.Path, d.m = InProcess, m
	if bd := &d.bd; bd.Reset > 0 { // a limit policy: allow and deny keep no bucket
		d.Limit, d.Remaining = int(bd.Limit), int(bd.Remaining)
		d.RetryAfter, d.Reset = time.Duration(bd.RetryAfter), time.Duration(bd.Reset)
	}
	c.stats.inProcess.Add(1)
	if d.OK {
		c.stats.ok.Add(1)
	} else {
		c.stats.no.Add(1)
	}
	return d, true
}

// attachSoon attaches in the background, unless attached, attaching, or
// within the pause after the last attempt (inproc.RetryEvery; more after
// failures, and while the daemon shares nothing).
func (c *Client) attachSoon() {
	s := &c.sharing
	if !s.on || s.cur.Load() != nil {
		return
	}
	now := time.Now().UnixNano()
	if now < s.next.Load() || !s.attaching.CompareAndSwap(false, true) {
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
		s.attempts.Add(1)
		s.mu.Lock()
		prev := s.last
		s.mu.Unlock()
		m, err := inproc.Attach(c.address, attachTimeout, prev)
		switch {
		case err != nil:
			s.pause = min(max(2*s.pause, inproc.RetryEvery), notSharedRetry)
			s.next.Store(time.Now().Add(s.pause).UnixNano())
			c.stats.attachErrors.Add(1)
			return
		case m == nil:
			// The daemon answered, sharing nothing (share_table = false):
			// look again now and then, in case a restart turns it on.
			s.next.Store(time.Now().Add(notSharedRetry).UnixNano())
			return
		}
		s.pause = 0
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.closed.Load() {
			return
		}
		s.last = m
		s.cur.Store(m)
		c.stats.attaches.Add(1)
	}()
}
