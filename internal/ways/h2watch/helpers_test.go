package h2watch

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoMethod answers a BytesValue with itself: an answer as large as the
// test asks.
const echoMethod = "/h2watch.test.Echo/Echo"

// watched is a listener whose connections dog watches.
type watched struct {
	net.Listener
	dog  *Watchdog
	done chan struct{}
}

func (l watched) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.dog.Watch(nc, l.done), nil
}

// startServer serves the echo and health services on an in-memory
// listener, each connection watched by a Watchdog of timeout, until the
// test ends; it returns the watchdog and the listener. Inside
// synctest.Test, the watchdog's timers and the server's are the bubble's
// fake time.
func startServer(t testing.TB, timeout time.Duration) (*Watchdog, *testkit.Listener) {
	t.Helper()
	l := testkit.NewListener()
	dog := New(timeout)
	srv := grpc.NewServer()
	srv.RegisterService(h2test.EchoService("h2watch.test.Echo"), struct{}{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(watched{l, dog, done})
	}()
	t.Cleanup(func() {
		close(done)
		hs.Shutdown()
		srv.Stop()
		<-served
	})
	return dog, l
}

// echo is the echo call's message of n bytes.
func echo(n int) proto.Message { return wrapperspb.Bytes(bytes.Repeat([]byte("e"), n)) }
