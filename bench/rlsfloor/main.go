// Command rlsfloor serves bench/rls.sh's floor: a gRPC server of Envoy's
// rate limit service (envoy.service.ratelimit.v3) built with
// google.golang.org/grpc on its defaults, answering every call OK with
// one OK status per descriptor, deciding nothing. What it spends per call
// is what grpc-go spends on a call, the least any service built on it
// spends; the reference's CPU per decision over this floor's is the most
// such a service could do better than the reference.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (floor) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		res.Statuses = append(res.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return res, nil
}

func main() {
	addr := flag.String("listen", "unix:/tmp/rlsfloor.sock", "where to serve: unix:PATH or HOST:PORT")
	flag.Parse()
	network, a := "tcp", *addr
	if p, ok := strings.CutPrefix(a, "unix:"); ok {
		network, a = "unix", p
		os.Remove(p)
	}
	l, err := net.Listen(network, a)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, floor{})
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		s.Stop()
	}()
	if err := s.Serve(l); err != nil {
		log.Fatal(err)
	}
}
