package h2test

import (
	"context"
	"net"
	"testing"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GRPC is a grpc-go client connection to addr (host:port), closed when
// the test ends.
func GRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// GRPCMem is a grpc-go client connection whose connections are dialled
// on l, an in-memory listener, closed when the test ends; made inside
// synctest.Test, its timers and the server's are fake time.
func GRPCMem(t testing.TB, l *testkit.Listener) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return l.Dial() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// EchoService is a grpc-go service of the given name whose one method,
// Echo, answers a BytesValue with itself: an answer as large as the test
// asks.
func EchoService(name string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: name,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.BytesValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return in, nil
			}}},
	}
}
