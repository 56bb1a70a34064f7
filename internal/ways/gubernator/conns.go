package gubernator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/dthrottle/dthrottle/internal/ways/h2unary"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// This file owns the two servers a Server's connections are handed to,
// the gRPC one and the HTTP one, and their bounds.

// Bounds of the gRPC server beyond Config's.
const (
	maxStreams     = 100      // requests in progress on one connection (HTTP/2 SETTINGS)
	maxHeaderBytes = 16 << 10 // a request's header list, and an HTTP request's head
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

// connHandler serves each connection a serve.Server accepts: one from a
// GRPCListener on its own goroutine, as unary gRPC calls (package
// h2unary, which bounds the calls, their size, time and memory); any
// other through a listener handed to the HTTP server, holding the
// connection's goroutine until that server closes it, so that it keeps
// its place under MaxConns meanwhile. When the connections' context ends
// (the stop began), HealthCheck turns unhealthy and both stop
// gracefully: the requests read are answered, then the connections are
// closed. It is safe for concurrent use.
type connHandler struct {
	svc    *service
	grpc   *h2unary.Server
	http   *http.Server
	httpLn *serve.Handoff
	start  sync.Once
}

func newConnHandler(svc *service, cfg Config, log *slog.Logger) *connHandler {
	h := &connHandler{svc: svc, httpLn: serve.NewHandoff()}
	h.grpc = h2unary.New(h2unary.Config{
		Methods: map[string]h2unary.Handler{
			guber.V1_GetRateLimits_FullMethodName: unary(func(req *guber.GetRateLimitsReq) (proto.Message, error) {
				return svc.GetRateLimits(context.Background(), req)
			}),
			guber.V1_HealthCheck_FullMethodName: unary(func(req *guber.HealthCheckReq) (proto.Message, error) {
				return svc.HealthCheck(context.Background(), req)
			}),
			guber.V1_LiveCheck_FullMethodName: unary(func(req *guber.LiveCheckReq) (proto.Message, error) {
				return svc.LiveCheck(context.Background(), req)
			}),
		},
		MaxMessageBytes:  MaxMessageBytes,
		MaxStreams:       maxStreams,
		MaxHeaderBytes:   maxHeaderBytes,
		MaxRequests:      cfg.MaxRequests,
		Busy:             fmt.Sprintf("gubernator: requests in progress: over %d", cfg.MaxRequests),
		HandshakeTimeout: cfg.HandshakeTimeout,
		RequestTimeout:   cfg.RequestTimeout,
		IdleTimeout:      cfg.IdleTimeout,
	})

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

// unary is a method of the service as h2unary serves it: the request
// unmarshalled into a new Req (a failure is INTERNAL, in grpc-go's
// words), the answer marshalled after out, as grpc-go's codec does.
func unary[Req any, PReq interface {
	*Req
	proto.Message
}](method func(PReq) (proto.Message, error)) h2unary.Handler {
	return func(in, out []byte) ([]byte, error) {
		req := PReq(new(Req))
		if err := proto.Unmarshal(in, req); err != nil {
			return out, status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		resp, err := method(req)
		if err != nil {
			return out, err
		}
		out, err = proto.MarshalOptions{}.MarshalAppend(out, resp)
		if err != nil {
			return out, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
		}
		return out, nil
	}
}

// ServeConn serves nc as gRPC when it came from a GRPCListener, through
// the HTTP server otherwise, and returns once nc is done.
func (h *connHandler) ServeConn(ctx context.Context, nc net.Conn) {
	h.start.Do(func() {
		go h.http.Serve(h.httpLn) // returns once Shutdown closes httpLn
		context.AfterFunc(ctx, func() {
			h.svc.stopping.Store(true)
			h.http.Shutdown(context.Background())
		})
	})
	if g, ok := nc.(grpcConn); ok {
		h.grpc.ServeConn(ctx, g.Conn)
		return
	}
	h.httpLn.Serve(nc)
}
