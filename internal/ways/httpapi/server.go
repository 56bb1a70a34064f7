// Package httpapi is dthrottled's HTTP decision endpoint: GET
// /v1/allow?tag=<tag> spends a token for the tag, as a query on the line
// protocol does, from the same table, and answers 200 when the request is
// served or the refusal status (403 by default, for nginx's auth_request;
// or 429) when it is not, with the IETF draft's RateLimit-Policy and
// RateLimit header fields on both and Retry-After on a refusal. It is made
// for proxies' subrequests (nginx auth_request, Caddy forward_auth,
// HAProxy), on a listener of its own, never the admin endpoint's.
//
// POST /v1/charge?tag=<tag>&cost=<n> charges a cost known only after the
// response (an answer's tokens, a query's rows): n tokens taken from the
// tag's bucket whatever is left, into debt if need be, answered 204 and
// never refused.
//
// The package owns the endpoint's HTTP handling: parsing the request,
// writing the answer, and the bad-input discipline (a URI over 8 KiB gets
// 414, a request head over 12 KiB 431, a slow client's connection is
// closed after a timeout, a connection over MaxConns gets 503). It decides
// through a [decide.Decider] it is given, and charges through a
// [decide.Charger]; *bucket.Table is both.
// Accepting connections, their limit and shutdown are package serve's, of
// which a [Server] is made; net/http reads and writes each connection.
package httpapi

import (
	"cmp"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// Defaults for the zero fields of Config.
const (
	DefaultRefuseStatus      = http.StatusForbidden
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultWriteTimeout      = 5 * time.Second
)

// Limits on a request. maxHeaderBytes is net/http's limit, to which it
// adds 4 KiB of slack: a longer request line or head gets 431.
const (
	maxURI         = 8 << 10
	maxHeaderBytes = 8 << 10
)

// Config configures a Server. The zero Config is usable: every zero field
// takes its default, and there is no connection limit.
type Config struct {
	// MaxConns is the most connections served at once; a connection over
	// it is answered 503 and closed. 0 or less means no limit (dthrottled
	// gives its http.max_conns).
	MaxConns int
	// RefuseStatus is the status of a refusal: 403 (the default) or 429.
	RefuseStatus int
	// ReadHeaderTimeout closes a connection whose request head takes
	// longer to arrive; IdleTimeout one that sends no request for that
	// long; WriteTimeout one whose answer cannot be written in time.
	ReadHeaderTimeout, IdleTimeout, WriteTimeout time.Duration
	// Charger takes POST /v1/charge; nil leaves that path unknown (404).
	Charger decide.Charger
	// Limiter decides a query that states its limit (limit, per, rate,
	// burst, algorithm); nil answers such a query 400.
	Limiter decide.Limiter
	// Clock gives the time every decision is taken at; nil is time.Now.
	Clock func() time.Time
	// Logger receives connection-limit warnings (at most one a second),
	// accept errors, and net/http's own errors (at debug level); never a
	// line per request. Nil discards.
	Logger *slog.Logger
}

// Stats are a Server's counters since New: a plain value, whose zero
// value is a server that has served nothing.
type Stats struct {
	serve.Stats        // connections: accepted, rejected (refused over MaxConns), active
	Allowed     uint64 // requests served (2xx), dry runs included
	Refused     uint64 // requests refused (the refusal status)
	DryRun      uint64 // of Allowed, those a dry-run policy would have refused
	Charged     uint64 // charges applied (POST /v1/charge answered 204)
	Bad         uint64 // requests answered 4xx for their form (400, 404, 405, 414), or for a stated limit (400, 403)
	Busy        uint64 // requests stating a limit the table had no room for (503)
}

// Server is the HTTP decision endpoint: a serve.Server (Serve, Shutdown,
// Close) whose handler hands each connection to net/http. Create it with
// New. It is safe for concurrent use; the zero Server is not usable.
type Server struct {
	*serve.Server
	decide decide.Decider
	charge decide.Charger // nil: POST /v1/charge is off
	limit  decide.Limiter // nil: a stated limit is answered 400
	now    func() time.Time
	refuse atomic.Int64
	bufs   sync.Pool // *[]byte, for the tag and the header values

	allowed, refused, dryRun, charged, bad, busy atomic.Uint64
}

// New returns a Server that decides through d, and charges through
// cfg.Charger when it is set. It serves nothing until Serve.
func New(d decide.Decider, cfg Config) *Server {
	s := &Server{decide: d, charge: cfg.Charger, limit: cfg.Limiter, now: cfg.Clock}
	if s.now == nil {
		s.now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxConns := cfg.MaxConns
	s.SetRefuseStatus(cfg.RefuseStatus)
	s.bufs.New = func() any { b := make([]byte, 0, 256); return &b }
	h := newConnHandler(&http.Server{
		Handler:           s,
		ReadHeaderTimeout: cmp.Or(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		IdleTimeout:       cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
		WriteTimeout:      cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout),
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	})
	s.Server = serve.New(h, serve.Config{Name: "http endpoint", MaxConns: maxConns, Busy: busy, Logger: log})
	return s
}

// SetRefuseStatus sets the status of a refusal: 429, or 403 for anything
// else (0 included).
func (s *Server) SetRefuseStatus(code int) {
	if code != http.StatusTooManyRequests {
		code = DefaultRefuseStatus
	}
	s.refuse.Store(int64(code))
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Stats: s.Server.Stats(),
		Allowed: s.allowed.Load(), Refused: s.refused.Load(), DryRun: s.dryRun.Load(), Charged: s.charged.Load(), Bad: s.bad.Load(), Busy: s.busy.Load()}
}

// Shared header values, never modified.
var (
	textPlain = []string{"text/plain; charset=utf-8"}
	noStore   = []string{"no-store"}
	length3   = []string{"3"}
	getHead   = []string{"GET, HEAD"}
	post      = []string{"POST"}
	dryServed = []string{"served"}
	dryRefuse = []string{"refused"}
)

// ServeHTTP answers one request to the endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Cache-Control"] = noStore
	switch {
	case r.URL.Path == pathCharge && s.charge != nil:
		s.serveCharge(w, r)
		return
	case r.URL.Path != pathAllow:
		if s.charge != nil {
			s.fail(w, http.StatusNotFound, "not found: the endpoint is GET /v1/allow?tag= and POST /v1/charge?tag=&cost=")
			return
		}
		s.fail(w, http.StatusNotFound, "not found: the endpoint is GET /v1/allow?tag=")
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		h["Allow"] = getHead
		s.fail(w, http.StatusMethodNotAllowed, "method not allowed: GET or HEAD")
		return
	case len(r.RequestURI) > maxURI:
		s.fail(w, http.StatusRequestURITooLong, "URI too long: at most 8 KiB")
		return
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	q, err := parseQuery(r.URL.RawQuery, *bp)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	tag := q.tag
	var v bucket.Verdict
	if q.stated {
		if v, err = s.allowStated(tag, q.req); err != nil {
			*bp = tag[:0]
			s.failStated(w, err)
			return
		}
	} else {
		v = s.decide.AllowN(s.now(), tag, q.cost)
	}
	status := http.StatusOK
	if !v.Allowed {
		status = int(s.refuse.Load())
	}
	b := tag[len(tag):] // header values go after the tag in the same buffer
	if v.Policy.Action == bucket.Limit && v.Policy.Name != "" {
		n := len(b)
		b = rlheader.AppendPolicy(b, v.Policy)
		h[rlheader.FieldPolicy] = []string{string(b[n:])}
		n = len(b)
		b = rlheader.AppendRateLimit(b, v)
		h[rlheader.FieldRateLimit] = []string{string(b[n:])}
		if s, ok := rlheader.RetryAfter(v); ok {
			h[rlheader.FieldRetryAfter] = []string{strconv.FormatInt(s, 10)}
		}
	}
	if v.Policy.DryRun {
		h[rlheader.FieldDryRun] = dryServed
		if v.WouldRefuse {
			h[rlheader.FieldDryRun] = dryRefuse
			s.dryRun.Add(1)
		}
	}
	*bp = b[:0]
	h["Content-Type"] = textPlain
	h["Content-Length"] = length3
	w.WriteHeader(status)
	if v.Allowed {
		s.allowed.Add(1)
		if r.Method == http.MethodGet {
			w.Write(okBody)
		}
		return
	}
	s.refused.Add(1)
	if r.Method == http.MethodGet {
		w.Write(noBody)
	}
}

var okBody, noBody = []byte("OK\n"), []byte("NO\n")

// The endpoint's paths.
const (
	pathAllow  = "/v1/allow"
	pathCharge = "/v1/charge"
)

// serveCharge answers POST /v1/charge?tag=&cost=: the cost is taken from
// the tag's bucket, whatever it holds, and the answer is 204, with no
// body, whatever the bucket's level. The request's body is not read.
func (s *Server) serveCharge(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method != http.MethodPost:
		w.Header()["Allow"] = post
		s.fail(w, http.StatusMethodNotAllowed, "method not allowed: POST")
		return
	case len(r.RequestURI) > maxURI:
		s.fail(w, http.StatusRequestURITooLong, "URI too long: at most 8 KiB")
		return
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	tag, cost, err := parseCharge(r.URL.RawQuery, *bp)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	s.charge.Charge(s.now(), tag, cost)
	*bp = tag[:0]
	s.charged.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// fail answers a request the endpoint cannot decide, with a reason.
func (s *Server) fail(w http.ResponseWriter, code int, msg string) {
	s.bad.Add(1)
	h := w.Header()
	h["Content-Type"] = textPlain
	w.WriteHeader(code)
	w.Write([]byte(msg + "\n"))
}
