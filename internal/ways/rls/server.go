// Package rls is dthrottled's rate limit service for Envoy: the gRPC
// service envoy.service.ratelimit.v3.RateLimitService, whose
// ShouldRateLimit Envoy (and what is built on it) asks before it serves a
// request, answered from dthrottled's own table. Each descriptor of a
// request becomes one tag (tag.go), which the [[policy]] prefixes match
// as they match any other; a request is served when every one of its
// descriptors is, and then each descriptor's cost (hits_addend) is taken
// from its bucket; a refused request takes nothing (decide.go). A
// descriptor holding the charge entry charges its tag instead, as Envoy's
// apply_on_stream_done sends when a response is done. The answer states
// each descriptor's limit, the tokens left and the time until its bucket
// is full again, and carries the RateLimit, RateLimit-Policy and
// Retry-After header fields the HTTP decision endpoint would send
// (package rlheader), for Envoy to add to its response. The gRPC health
// service answers Envoy's health checks.
//
// A [Server] is a serve.Server whose handler hands each connection it
// accepts to one grpc.Server, so accepting, the connection limit (a
// connection over max_conns is closed at once) and the stop are package
// serve's, as for every way in. The gRPC server bounds the rest: message
// size, streams per connection, the time a connection takes to start and
// a request to arrive, keepalive and idle connections (Config). What it
// does not bound, a watchdog on each connection does (package h2watch): an
// answer the client's flow-control window, or a client that reads
// nothing, keeps from being written within RequestTimeout closes the
// connection; and the requests in progress on all connections together
// are at most MaxRequests.
//
// The service decides through a [Table], which *bucket.Table is.
package rls

import (
	"cmp"
	"log/slog"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/limits"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// Defaults for the zero fields of Config.
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultKeepaliveTime    = time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
)

// Limits on a request. A message over MaxMessageBytes is refused by the
// gRPC server with RESOURCE_EXHAUSTED before it is read; within it, a
// request over the others is answered INVALID_ARGUMENT.
const (
	MaxMessageBytes = 64 << 10            // a request's encoded size
	MaxDescriptors  = 64                  // descriptors in a request
	MaxEntries      = 16                  // entries in a descriptor, the charge entry included
	MaxStringBytes  = limits.MaxRLSString // the domain, and each entry's key and value
	// MaxStreams is the most requests in progress on one connection (the
	// HTTP/2 setting a client keeps to; more are refused with
	// REFUSED_STREAM).
	MaxStreams = 100
	// maxHeaderBytes bounds a request's header list.
	maxHeaderBytes = 16 << 10
	// minPingInterval is the shortest interval between a client's
	// keepalive pings: a client pinging more often is sent GOAWAY.
	minPingInterval = 10 * time.Second
)

// What a connection's buffers hold. Envoy keeps a few connections and
// sends small requests on them: 8 KiB read at once holds dozens (gRPC's
// default reads 32 KiB). The write buffer is gRPC's default, 32 KiB,
// shared between the connections (gRPC's default too), so an idle
// connection holds none. The windows are the smallest gRPC keeps
// (64 KiB), and fixed: a request's message is at most 64 KiB, and gRPC
// would otherwise widen them, up to 16 MiB, for a client that sends fast.
const (
	readBufferBytes = 8 << 10
	windowBytes     = 64 << 10
)

// Config configures a Server. The zero Config is usable: every zero
// field takes its default, there is no limit on connections or requests,
// and charging is off.
type Config struct {
	// MaxConns is the most connections served at once; a connection over
	// it is closed at once. 0 or less means no limit (dthrottled gives
	// its rls.max_conns).
	MaxConns int
	// MaxRequests is the most requests in progress at once, on all
	// connections together (each at most MaxStreams): one more is
	// answered RESOURCE_EXHAUSTED at once. A request is in progress from
	// its headers until its answer is written. 0 or less means no limit
	// (dthrottled gives its rls.max_requests).
	MaxRequests int
	// UnmatchedOK answers a descriptor whose tag no prefix policy matches
	// OK, with no limit and nothing spent, rather than under the default
	// policy.
	UnmatchedOK bool
	// ChargeKey is the entry key that makes a descriptor a charge; ""
	// makes none.
	ChargeKey string
	// HandshakeTimeout closes a connection that has not completed the
	// HTTP/2 handshake within it. RequestTimeout answers
	// DEADLINE_EXCEEDED to a request not received in full within it of
	// its headers (or the client's own deadline, if sooner), and closes
	// a connection on which an answer cannot be written within it of
	// the request's headers, or a write waits longer (package h2watch).
	// IdleTimeout closes a connection with no request in progress for
	// that long (after a GOAWAY). KeepaliveTime is how long a connection
	// may be silent before the server pings it, and KeepaliveTimeout
	// how long it then waits for an answer before closing it.
	HandshakeTimeout, RequestTimeout, IdleTimeout, KeepaliveTime, KeepaliveTimeout time.Duration
	// Limiter decides a descriptor that states its limit; nil answers a
	// request holding one INVALID_ARGUMENT. *bucket.Table is one.
	Limiter decide.Limiter
	// Clock gives the time every decision is taken at; nil is time.Now.
	Clock func() time.Time
	// Logger receives connection-limit warnings (at most one a second)
	// and accept errors; never a line per request. Nil discards.
	Logger *slog.Logger
}

// Table is what the service asks the table: every descriptor checked
// (decide.Checker) before any is spent (decide.Decider), and charges
// (decide.Charger). *bucket.Table is a Table.
type Table interface {
	decide.Decider
	decide.Checker
	decide.Charger
}

var _ Table = (*bucket.Table)(nil)

// Stats are a Server's counters since New: a plain value, whose zero
// value is a server that has served nothing.
type Stats struct {
	serve.Stats        // connections: accepted, rejected (closed over MaxConns), active
	OK          uint64 // requests answered OK
	OverLimit   uint64 // requests answered OVER_LIMIT
	Bad         uint64 // requests answered INVALID_ARGUMENT, or refused for a descriptor's stated limit
	Busy        uint64 // requests (of any method) answered RESOURCE_EXHAUSTED over MaxRequests
	Stalled     uint64 // connections closed because an answer could not be written within RequestTimeout
	// Descriptors of the requests answered, by their status: OK (charges
	// not included), OVER_LIMIT, and charges applied.
	DescriptorsOK, DescriptorsOverLimit, Charges uint64
}

// Server is the rate limit service: a serve.Server (Serve, Shutdown,
// Close) whose connections a gRPC server serves. Create it with New. It
// is safe for concurrent use; the zero Server is not usable.
type Server struct {
	*serve.Server
	table       Table
	limiter     decide.Limiter // nil: a stated limit is refused
	now         func() time.Time
	opts        atomic.Pointer[options]
	timeout     time.Duration // RequestTimeout
	maxRequests int64
	errBusy     error // the answer over maxRequests
	dog         *h2watch.Watchdog
	grpc        *grpc.Server
	health      *health.Server
	stopped     chan struct{} // closed once the health service says NOT_SERVING

	ok, overLimit, bad, busy atomic.Uint64
	descOK, descOver, charge atomic.Uint64
}

// options are the settings that change while the server runs.
type options struct {
	unmatchedOK bool
	chargeKey   string
}

// ServiceName is the service's name, as the health service knows it too.
var ServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName

// New returns a Server that decides and charges through t. It serves
// nothing until Serve.
func New(t Table, cfg Config) *Server {
	s := &Server{table: t, limiter: cfg.Limiter, now: cfg.Clock, timeout: cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout),
		maxRequests: int64(cfg.MaxRequests), stopped: make(chan struct{})}
	s.errBusy = status.Errorf(codes.ResourceExhausted, "rls: requests in progress: over %d", s.maxRequests)
	s.dog = h2watch.New(s.timeout)
	if s.now == nil {
		s.now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.SetOptions(cfg.UnmatchedOK, cfg.ChargeKey)
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(MaxStreams),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.ConnectionTimeout(cmp.Or(cfg.HandshakeTimeout, DefaultHandshakeTimeout)),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
			Time:              cmp.Or(cfg.KeepaliveTime, DefaultKeepaliveTime),
			Timeout:           cmp.Or(cfg.KeepaliveTimeout, DefaultKeepaliveTimeout),
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.InTapHandle(s.tap),
		grpc.ReadBufferSize(readBufferBytes),
		grpc.InitialWindowSize(windowBytes),
		grpc.InitialConnWindowSize(windowBytes),
	)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, service{Server: s})
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, healthService{s.health, s.stopped})
	h := newConnHandler(s.grpc, s.stopHealth, s.dog)
	s.Server = serve.New(h, serve.Config{Name: "rate limit service", MaxConns: cfg.MaxConns, Logger: log})
	return s
}

// SetOptions sets what a reload may change: whether a descriptor no
// prefix policy matches is answered OK with no limit, and the charge
// entry's key ("" for none). Requests decided from then on use them.
func (s *Server) SetOptions(unmatchedOK bool, chargeKey string) {
	s.opts.Store(&options{unmatchedOK: unmatchedOK, chargeKey: chargeKey})
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Stats: s.Server.Stats(), OK: s.ok.Load(), OverLimit: s.overLimit.Load(), Bad: s.bad.Load(),
		Busy: s.busy.Load(), Stalled: s.dog.Stalled(),
		DescriptorsOK: s.descOK.Load(), DescriptorsOverLimit: s.descOver.Load(), Charges: s.charge.Load()}
}

// stopHealth turns the health service to NOT_SERVING, once the stop
// begins, and ends the health watches.
func (s *Server) stopHealth() {
	s.health.Shutdown()
	close(s.stopped)
}
