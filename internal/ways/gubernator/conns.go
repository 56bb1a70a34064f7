package gubernator

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the two servers a Server's connections are handed to,
// the gRPC one and the HTTP one, and their bounds.

// Bounds of the gRPC server beyond Config's.
const (
	maxStreams      = 100              // requests in progress on one connection (HTTP/2 SETTINGS)
	maxHeaderBytes  = 16 << 10         // a request's header list, and an HTTP request's head
	minPingInterval = 10 * time.Second // a client pinging more often is sent GOAWAY
	keepaliveTime   = time.Minute
	keepaliveWait   = 20 * time.Second
)

// GRPCListener returns l, whose connections a Server serves as gRPC; a
// Server serves those of any other listener as HTTP.
func GRPCListener(l net.Listener) net.Listener { return grpcListener{l} }

// IsGRPC reports whether l came from GRPCListener.
func IsGRPC(l net.Listener) bool {
	_, ok := l.(grpcListener)
	return ok
}

type grpcListener struct{ net.Listener }

func (l grpcListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return grpcConn{nc}, nil
}

// grpcConn marks a connection accepted on a GRPCListener.
type grpcConn struct{ net.Conn }

// connHandler hands each connection a serve.Server accepts to the gRPC
// server or the HTTP server, through a listener of each, and holds the
// connection's goroutine until that server closes it, so that it keeps
// its place under MaxConns meanwhile. When the connections' context ends
// (the stop began), HealthCheck turns unhealthy and both servers stop
// gracefully: the requests in progress are answered, then the
// connections are closed. The gRPC connections are watched (package
// h2watch): one on which an answer cannot be written within
// RequestTimeout is closed. It is safe for concurrent use.
type connHandler struct {
	svc            *service
	dog            *h2watch.Watchdog
	grpc           *grpc.Server
	http           *http.Server
	grpcLn, httpLn *serve.Handoff
	start          sync.Once
}

func newConnHandler(svc *service, cfg Config, log *slog.Logger) *connHandler {
	h := &connHandler{svc: svc, dog: h2watch.New(cfg.RequestTimeout), grpcLn: serve.NewHandoff(), httpLn: serve.NewHandoff()}
	b := &bounds{max: int64(cfg.MaxRequests), timeout: cfg.RequestTimeout, streams: h.dog.Streams, busy: &svc.counts.busy,
		errBusy: status.Errorf(codes.ResourceExhausted, "gubernator: requests in progress: over %d", cfg.MaxRequests)}
	h.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout, Time: keepaliveTime, Timeout: keepaliveWait}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.InTapHandle(b.tap),
		grpc.SharedWriteBuffer(true),
	)
	guber.RegisterV1Server(h.grpc, svc)

	// Gubernator's own gateway options (daemon.go): field names as in the
	// proto, every field written, unknown fields ignored.
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}))
	if err := guber.RegisterV1HandlerServer(context.Background(), gw, svc); err != nil {
		panic("gubernator: registering the gateway: " + err.Error()) // it returns no error
	}
	h.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
			gw.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: cfg.HandshakeTimeout,
		ReadTimeout:       cfg.RequestTimeout,
		WriteTimeout:      cfg.RequestTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return h
}

// ServeConn has the gRPC server serve nc, watched, when it came from a
// GRPCListener, the HTTP server otherwise, and returns once nc is closed.
func (h *connHandler) ServeConn(ctx context.Context, nc net.Conn) {
	h.start.Do(func() {
		go h.grpc.Serve(h.grpcLn) // returns once GracefulStop closes grpcLn
		go h.http.Serve(h.httpLn) // returns once Shutdown closes httpLn
		context.AfterFunc(ctx, func() {
			h.svc.stopping.Store(true)
			var wg sync.WaitGroup
			wg.Go(h.grpc.GracefulStop)
			wg.Go(func() { h.http.Shutdown(context.Background()) })
			wg.Wait()
		})
	})
	if g, ok := nc.(grpcConn); ok {
		h.grpcLn.Serve(h.dog.Watch(g.Conn, ctx.Done()))
		return
	}
	h.httpLn.Serve(nc)
}

// bounds keeps the gRPC requests in progress within max, and each within
// timeout. A request is in progress from its headers until its answer is
// written, as the watchdog counts them: an answer the client's window
// holds back is counted until the connection is closed. It is safe for
// concurrent use.
type bounds struct {
	max     int64 // <= 0: no limit
	timeout time.Duration
	streams func() int64 // requests in progress: the watchdog's Streams
	busy    *atomic.Uint64
	errBusy error
}

// tap runs as each request's stream opens, before its message is read:
// over max requests in progress it refuses the request, which is
// answered RESOURCE_EXHAUSTED at once and holds nothing; otherwise it
// gives the stream a deadline of timeout, unless the client's is sooner,
// so that a request whose message never arrives in full is answered
// DEADLINE_EXCEEDED and its memory freed. (The stream's own context, the
// parent, is cancelled when the stream ends, which ends the timer.)
func (b *bounds) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	// The count has this request in it, and may have the next few the
	// connection sent, already read.
	if b.max > 0 && b.streams() > b.max {
		b.busy.Add(1)
		return nil, b.errBusy
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= b.timeout {
		return ctx, nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	_ = cancel
	return ctx, nil
}
