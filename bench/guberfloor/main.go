// Command guberfloor serves bench/gubernator.sh's floor: a gRPC server of
// Gubernator's API (pb.gubernator.V1) built with google.golang.org/grpc
// on its defaults, answering every rate limit UNDER_LIMIT with its own
// limit remaining, deciding nothing and telling no peer. What it spends
// per call is what grpc-go spends on a call over TCP, the least any
// server of the API built on it spends; Gubernator's CPU per decision
// over this floor's is the most such a server could do better than
// Gubernator.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
)

type floor struct {
	guber.UnimplementedV1Server
}

func (floor) GetRateLimits(_ context.Context, req *guber.GetRateLimitsReq) (*guber.GetRateLimitsResp, error) {
	resp := &guber.GetRateLimitsResp{Responses: make([]*guber.RateLimitResp, len(req.GetRequests()))}
	for i, r := range req.GetRequests() {
		resp.Responses[i] = &guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: r.GetLimit(), Remaining: r.GetLimit()}
	}
	return resp, nil
}

func (floor) HealthCheck(context.Context, *guber.HealthCheckReq) (*guber.HealthCheckResp, error) {
	return &guber.HealthCheckResp{Status: "healthy", PeerCount: 1}, nil
}

func main() {
	addr := flag.String("listen", "127.0.0.1:1051", "where to serve gRPC, host:port")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	guber.RegisterV1Server(s, floor{})
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		s.Stop()
	}()
	if err := s.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
