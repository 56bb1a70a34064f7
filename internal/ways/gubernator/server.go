// Package gubernator is dthrottled's answer to Gubernator's API: the gRPC
// service pb.gubernator.V1 (GetRateLimits, HealthCheck, LiveCheck) and its
// HTTP form (POST /v1/GetRateLimits, GET /v1/HealthCheck, GET
// /v1/LiveCheck), with Gubernator's own generated types, so that
// Gubernator's clients, and its JSON, work unchanged. Each rate limit of
// a call is decided by the table under the limit it states (limit.go):
// the tag is Gubernator's hash key, name + "_" + unique_key, and the
// limit, duration, burst, algorithm and behavior become a
// bucket.Request. Every node answers from its own table at once and
// tells its peers of the hits as it does for every tag, so GLOBAL,
// BATCHING and NO_BATCHING all mean what dthrottle always does.
//
// A [Server] is one serve.Server for both listeners: the connections of a
// listener wrapped by [GRPCListener] are served as unary gRPC calls
// (package h2unary), all others by a net/http server that runs
// Gubernator's grpc-gateway routes with the marshaler options Gubernator
// gives them. Accepting, the connection limit (a connection over
// MaxConns is closed at once) and the stop are package serve's, as for
// every way in. The gRPC side bounds message size, streams per
// connection, the handshake, idle connections, MaxRequests the gRPC
// requests in progress at once, and time: a connection on which an
// answer cannot be written within RequestTimeout, the client's
// flow-control window spent or nothing read, is closed (conns.go); the
// HTTP server bounds a request's head, body and time.
//
// The service decides through a decide.Limiter, which *bucket.Table is.
package gubernator

import (
	"cmp"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/h2unary"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// MaxBatch is the most rate limits one call may ask, as Gubernator's
// maxBatchSize: a call with more is answered OUT_OF_RANGE (HTTP 400).
const MaxBatch = 1000

// MaxMessageBytes is the largest request, gRPC message or HTTP body: a
// full batch of 1000 with keys of some 900 bytes. A larger gRPC message
// is refused RESOURCE_EXHAUSTED before it is read, a larger body 400.
const MaxMessageBytes = 1 << 20

// Defaults for the zero fields of Config.
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Config configures a Server. The zero Config is usable: every zero field
// takes its default, and there is no limit on connections or requests.
type Config struct {
	// MaxConns is the most connections served at once, on both
	// listeners together; one more is closed at once. 0 or less means no
	// limit (dthrottled gives its gubernator.max_conns).
	MaxConns int
	// MaxRequests is the most gRPC requests in progress at once, on all
	// connections together, each from its headers until its answer is
	// written: one more is answered RESOURCE_EXHAUSTED at once. 0 or
	// less means no limit (dthrottled gives its gubernator.max_requests).
	// An HTTP connection asks one at a time.
	MaxRequests int
	// HandshakeTimeout closes a gRPC connection that has not completed
	// the HTTP/2 handshake within it, and an HTTP connection whose
	// request head takes longer. RequestTimeout answers a gRPC request
	// not received in full within it DEADLINE_EXCEEDED, closes a gRPC
	// connection on which an answer cannot be written within it of the
	// request's headers, or a write waits longer, and closes an HTTP
	// connection whose request and answer take longer. IdleTimeout
	// closes a connection with no request for that long.
	HandshakeTimeout, RequestTimeout, IdleTimeout time.Duration
	// Peers returns how many peers the node knows, for HealthCheck's
	// peer_count (which counts the node too, as Gubernator's does); nil
	// is none.
	Peers func() int
	// Advertise is HealthCheck's advertise_address: the gRPC listener's
	// address.
	Advertise string
	// Clock gives the time every decision is taken at; nil is time.Now.
	Clock func() time.Time
	// Logger receives connection-limit warnings (at most one a second),
	// accept errors and net/http's own errors (at debug level); never a
	// line per request. Nil discards.
	Logger *slog.Logger
}

// Stats are a Server's counters since New: a plain value, whose zero
// value is a server that has served nothing.
type Stats struct {
	serve.Stats        // connections: accepted, rejected (closed over MaxConns), active
	Calls       uint64 // GetRateLimits calls answered
	TooLarge    uint64 // GetRateLimits calls refused for more than MaxBatch rate limits
	Busy        uint64 // gRPC requests answered RESOURCE_EXHAUSTED over MaxRequests
	Stalled     uint64 // gRPC connections closed because an answer could not be written within RequestTimeout
	// Rate limits of the calls answered, by their answer.
	UnderLimit, OverLimit, Errors uint64
}

// Server is Gubernator's API: a serve.Server (Serve, Shutdown, Close)
// whose connections a gRPC server or a net/http server serves. Create it
// with New. It is safe for concurrent use; the zero Server is not usable.
type Server struct {
	*serve.Server
	svc  *service
	grpc *h2unary.Server
}

// New returns a Server that decides through l. It serves nothing until
// Serve.
func New(l decide.Limiter, cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc := &service{limiter: l, now: cfg.Clock, peers: cfg.Peers, advertise: cfg.Advertise}
	if svc.now == nil {
		svc.now = time.Now
	}
	cfg.HandshakeTimeout = cmp.Or(cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	h := newConnHandler(svc, cfg, log)
	return &Server{Server: serve.New(h, serve.Config{Name: "gubernator api", MaxConns: cfg.MaxConns, Logger: log}), svc: svc, grpc: h.grpc}
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	c := &s.svc.counts
	return Stats{Stats: s.Server.Stats(), Calls: c.calls.Load(), TooLarge: c.tooLarge.Load(), Busy: s.grpc.Busy(), Stalled: s.grpc.Stalled(),
		UnderLimit: c.under.Load(), OverLimit: c.over.Load(), Errors: c.errors.Load()}
}

// service answers pb.gubernator.V1, for the gRPC server and the HTTP
// gateway alike.
type service struct {
	guber.UnimplementedV1Server
	limiter   decide.Limiter
	now       func() time.Time
	peers     func() int
	advertise string
	stopping  atomic.Bool // HealthCheck says unhealthy once the stop began
	counts    struct {
		calls, tooLarge, under, over, errors atomic.Uint64
	}
}

// errTooLarge is Gubernator's answer to a call of more than MaxBatch.
var errTooLarge = status.Errorf(codes.OutOfRange, "Requests.RateLimits list too large; max size is '%d'", MaxBatch)

// GetRateLimits decides each rate limit of req in order, all at the time
// the call is read, and answers them in the same order. A bad rate limit
// is answered with its error, and the others decided all the same.
func (s *service) GetRateLimits(_ context.Context, req *guber.GetRateLimitsReq) (*guber.GetRateLimitsResp, error) {
	if len(req.Requests) > MaxBatch {
		s.counts.tooLarge.Add(1)
		return nil, errTooLarge
	}
	now := s.now()
	resp := &guber.GetRateLimitsResp{Responses: make([]*guber.RateLimitResp, len(req.Requests))}
	var tag []byte
	for i, r := range req.Requests {
		resp.Responses[i] = s.decide(now, r, &tag)
	}
	s.counts.calls.Add(1)
	return resp, nil
}

// decide answers one rate limit; tag is the buffer its key is built in.
func (s *service) decide(now time.Time, r *guber.RateLimitReq, tag *[]byte) *guber.RateLimitResp {
	req, bad := toRequest(now, r)
	if bad != "" {
		s.counts.errors.Add(1)
		return &guber.RateLimitResp{Error: bad}
	}
	*tag = appendKey((*tag)[:0], r)
	v, err := s.limiter.AllowQuota(now, *tag, req)
	if err != nil {
		s.counts.errors.Add(1)
		return &guber.RateLimitResp{Error: err.Error()}
	}
	if v.Allowed {
		s.counts.under.Add(1)
	} else {
		s.counts.over.Add(1)
	}
	return toResponse(now, r, req, v)
}

// HealthCheck answers "healthy" with the peers the node knows, itself
// included, and its gRPC address; "unhealthy" once the stop began.
func (s *service) HealthCheck(context.Context, *guber.HealthCheckReq) (*guber.HealthCheckResp, error) {
	n := 1
	if s.peers != nil {
		n += s.peers()
	}
	resp := &guber.HealthCheckResp{Status: guber.Healthy, PeerCount: int32(min(n, 1<<31-1)), AdvertiseAddress: s.advertise}
	if s.stopping.Load() {
		resp.Status, resp.Message = guber.UnHealthy, "stopping"
	}
	return resp, nil
}

// LiveCheck answers while the server runs.
func (s *service) LiveCheck(context.Context, *guber.LiveCheckReq) (*guber.LiveCheckResp, error) {
	return &guber.LiveCheckResp{}, nil
}
