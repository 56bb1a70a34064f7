package h2unary

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// The test service: Echo answers a BytesValue with itself (an answer as
// large as the test asks), Fail answers failMessage, Hold waits until
// its channel lets it go.
const (
	echoMethod  = "/h2unary.test.Echo/Echo"
	failMethod  = "/h2unary.test.Echo/Fail"
	failMessage = "100% refused: \u00e9t\u00e9\n"
)

// testMethods are the test service's methods; hold, if not nil, is what
// Hold waits on.
func testMethods(hold chan struct{}) map[string]Handler {
	return map[string]Handler{
		echoMethod: func(req, out []byte) ([]byte, error) {
			in := new(wrapperspb.BytesValue)
			if err := proto.Unmarshal(req, in); err != nil {
				return out, status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
			}
			return proto.MarshalOptions{}.MarshalAppend(out, in)
		},
		failMethod: func(req, out []byte) ([]byte, error) {
			return out, status.Error(codes.FailedPrecondition, failMessage)
		},
		"/h2unary.test.Echo/Hold": func(req, out []byte) ([]byte, error) {
			<-hold
			return out, nil
		},
	}
}

// echo is the echo call's message of n bytes.
func echo(n int) proto.Message { return wrapperspb.Bytes(bytes.Repeat([]byte("e"), n)) }

// startServer serves cfg (the test methods if it has none) on l
// (127.0.0.1:0 if nil) through a serve.Server until the test ends; it
// returns both servers and the address.
func startServer(t testing.TB, cfg Config, l net.Listener) (*Server, *serve.Server, string) {
	t.Helper()
	if l == nil {
		var err error
		l, err = net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
	}
	if cfg.Methods == nil {
		cfg.Methods = testMethods(nil)
	}
	s := New(cfg)
	srv := serve.New(s, serve.Config{Name: "h2unary test"})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, srv, l.Addr().String()
}

// startMem serves cfg like startServer on an in-memory listener, which
// the test dials with h2test.DialMem: inside synctest.Test, every
// timeout of the server is on the bubble's fake clock.
func startMem(t testing.TB, cfg Config) (*Server, *serve.Server, *testkit.Listener) {
	t.Helper()
	l := testkit.NewListener()
	s, srv, _ := startServer(t, cfg, l)
	return s, srv, l
}

// ctx is a context that ends in 10 s, or with the test.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
