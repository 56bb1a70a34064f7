package h2unary

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// BenchmarkCall is a call of 16 bytes echoed, from grpc-go's client over
// loopback TCP, through this server and, for comparison, through
// grpc-go's server: one call in flight, and GOMAXPROCS x 16 at once on
// one connection. Allocations count the client's too.
func BenchmarkCall(b *testing.B) {
	servers := []struct {
		name  string
		start func(b *testing.B) string
	}{
		{"h2unary", func(b *testing.B) string { _, _, addr := startServer(b, Config{}, nil); return addr }},
		{"grpc-go", startGRPCGo},
	}
	for _, srv := range servers {
		b.Run(srv.name+"/serial", func(b *testing.B) {
			cc := h2test.GRPC(b, srv.start(b))
			in, out := echo(16), new(wrapperspb.BytesValue)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := cc.Invoke(ctx, echoMethod, in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(srv.name+"/parallel", func(b *testing.B) {
			cc := h2test.GRPC(b, srv.start(b))
			ctx := context.Background()
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				in, out := echo(16), new(wrapperspb.BytesValue)
				for pb.Next() {
					if err := cc.Invoke(ctx, echoMethod, in, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// startGRPCGo serves the echo method with grpc-go's server on its
// defaults until the benchmark ends, and returns its address.
func startGRPCGo(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	srv := grpc.NewServer()
	srv.RegisterService(h2test.EchoService("h2unary.test.Echo"), struct{}{})
	go srv.Serve(l)
	b.Cleanup(srv.Stop)
	return l.Addr().String()
}
