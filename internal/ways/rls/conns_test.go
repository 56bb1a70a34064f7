package rls

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestBadRequests: each request over a limit is answered
// INVALID_ARGUMENT, decides nothing (the valid descriptors before the bad
// one are not spent), and leaves the connection serving.
func TestBadRequests(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 5})
	s, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	many := make([]*rlcommon.RateLimitDescriptor, 5000)
	for i := range many {
		many[i] = desc("k=v")
	}
	negative := desc("k=v")
	negative.IsNegativeHits = true
	long := strings.Repeat("x", MaxStringBytes+1)
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many[:1]}, "rls: domain: empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "api"}, "rls: descriptors: none"},
		{"5000 descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: many}, "rls: descriptors: 5000, at most 64"},
		{"a long value after a good descriptor", &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=good"), desc("k=" + long)}}, "rls: descriptors[1].entries[0].value: 1025 bytes, at most 1024"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=good"), {}}}, "rls: descriptors[1]: no entries"},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{negative}}, "rls: descriptors[0].is_negative_hits: tokens are never given back"},
	} {
		_, err := c.call(tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.name)
		if err != nil && !strings.HasSuffix(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.msg)
		}
	}
	if st, err := tb.Peek(clk.Now(), "rls:api|k=good"); err == nil {
		t.Errorf("a bad request spent its good descriptor: %+v", st)
	}
	if r := c.ask("api", desc("k=good")); codesOf(r) != "OK: OK" {
		t.Fatalf("after the bad requests: %s", codesOf(r))
	}
	if st := s.Stats(); st.Bad != 6 || st.OK != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v, want 6 bad and 1 OK on one connection", st)
	}
}

// TestMessageLimits: a message over MaxMessageBytes is refused
// RESOURCE_EXHAUSTED unread; unknown fields are ignored; a method the
// service does not have is UNIMPLEMENTED.
func TestMessageLimits(t *testing.T) {
	_, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{})
	cc := h2test.GRPC(t, addr)
	c := &client{t: t, rl: rlsv3.NewRateLimitServiceClient(cc)}
	_, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=" + strings.Repeat("x", MaxMessageBytes))}})
	wantCode(t, err, codes.ResourceExhausted, "a message over 64 KiB")

	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}}
	unknown := protowire.AppendTag(nil, 1000, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("from a later version"))
	req.ProtoReflect().SetUnknown(unknown)
	req.Descriptors[0].ProtoReflect().SetUnknown(unknown)
	if r := c.ask2(req); codesOf(r) != "OK: OK" {
		t.Errorf("unknown fields: %s", codesOf(r))
	}

	err = cc.Invoke(context.Background(), "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit", req, new(rlsv3.RateLimitResponse))
	wantCode(t, err, codes.Unimplemented, "the v2 service")

	// A domain that is not UTF-8, which no protobuf library sends: the
	// message is refused as it is decoded.
	d, err := proto.Marshal(desc("k=v"))
	if err != nil {
		t.Fatal(err)
	}
	raw := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{'a', 0xff})
	raw = protowire.AppendBytes(protowire.AppendTag(raw, 2, protowire.BytesType), d)
	var out []byte
	err = cc.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, raw, &out, grpc.ForceCodecV2(rawCodec{}))
	wantCode(t, err, codes.Internal, "a domain that is not UTF-8")
}

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// ask2 sends req, failing the test on an error.
func (c *client) ask2(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	c.t.Helper()
	r, err := c.call(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// TestSlowRequest, on fake time: a request whose message does not arrive
// is answered DEADLINE_EXCEEDED exactly RequestTimeout after its
// headers, and the connection goes on serving.
func TestSlowRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		_, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{RequestTimeout: timeout})
		cc := h2test.GRPCMem(t, l)
		c := &client{t: t, rl: rlsv3.NewRateLimitServiceClient(cc)}
		c.ask("api", desc("k=v")) // connected
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Headers sent, the message never.
		start := time.Now()
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		err = st.RecvMsg(new(rlsv3.RateLimitResponse))
		wantCode(t, err, codes.DeadlineExceeded, "a request with no message")
		if took := time.Since(start); took != timeout {
			t.Errorf("answered after %v, want the request timeout (%v)", took, timeout)
		}
		if r := c.ask("api", desc("k=v")); codesOf(r) != "OK: OK" {
			t.Fatalf("after the slow request: %s", codesOf(r))
		}
	})
}

// closedAfter reads c until the server closes it and returns how long
// that took from start.
func closedAfter(t *testing.T, c net.Conn, start time.Time, what string) time.Duration {
	t.Helper()
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("%s: %v, want the connection closed", what, err)
	}
	return time.Since(start)
}

// readUntilClosed reads c until the server closes it, failing the test
// if that takes more than 10 s.
func readUntilClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("%s: %v, want the connection closed", what, err)
	}
}

// freed fails the test unless, once the bubble is idle, no connection
// is served.
func freed(t *testing.T, s *Server) {
	t.Helper()
	synctest.Wait()
	if n := s.Stats().Active; n != 0 {
		t.Errorf("%d connections still served", n)
	}
}

// TestHandshakeTimeout, on fake time: a connection that sends nothing is
// closed exactly HandshakeTimeout after it was made.
func TestHandshakeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{HandshakeTimeout: timeout})
		start := time.Now()
		c, err := l.Dial()
		must(t, err)
		defer c.Close()
		if took := closedAfter(t, c, start, "a silent connection"); took != timeout {
			t.Errorf("closed after %v, want the handshake timeout (%v)", took, timeout)
		}
		freed(t, s)
	})
}

// TestAbandonedConnection, on fake time: a connection that completed the
// handshake and then answers nothing, not even the server's keepalive
// ping, is closed exactly KeepaliveTime and KeepaliveTimeout after it
// went silent.
func TestAbandonedConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every, wait = time.Second, 100 * time.Millisecond
		s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{KeepaliveTime: every, KeepaliveTimeout: wait})
		c, err := l.Dial()
		must(t, err)
		defer c.Close()
		start := time.Now()
		c.Write([]byte(http2.ClientPreface))
		must(t, http2.NewFramer(c, nil).WriteSettings())
		if took := closedAfter(t, c, start, "an abandoned connection"); took != every+wait {
			t.Errorf("closed after %v, want KeepaliveTime + KeepaliveTimeout (%v)", took, every+wait)
		}
		freed(t, s)
	})
}

// TestPingFlood, on fake time: a client pinging more often than every
// 10 s is sent GOAWAY (ENHANCE_YOUR_CALM) at once, and its connection
// closed within a second (grpc-go's grace for the GOAWAY).
func TestPingFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{})
		c, err := l.Dial()
		must(t, err)
		defer c.Close()
		start := time.Now()
		c.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(c, c)
		must(t, fr.WriteSettings())
		for i := range 5 {
			if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				break // closed already
			}
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no GOAWAY before %v", err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
				}
				break
			}
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("GOAWAY after %v of fake time, want at once", took)
		}
		if took := closedAfter(t, c, start, "a connection flooding pings"); took > time.Second {
			t.Errorf("closed after %v, want within 1s", took)
		}
		freed(t, s)
	})
}

// TestIdleTimeout, on fake time: a connection with no request for
// IdleTimeout is sent GOAWAY and closed, then and not a nanosecond
// before; the client's next request opens another.
func TestIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 500 * time.Millisecond
		s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{IdleTimeout: idle})
		c := &client{t: t, rl: rlsv3.NewRateLimitServiceClient(h2test.GRPCMem(t, l))}
		c.ask("api", desc("k=v"))
		time.Sleep(idle - time.Nanosecond)
		synctest.Wait()
		if n := s.Stats().Active; n != 1 {
			t.Fatalf("%d connections served a nanosecond before the idle timeout, want 1", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := s.Stats().Active; n != 0 {
			t.Fatalf("%d connections served at the idle timeout, want 0", n)
		}
		c.ask("api", desc("k=v"))
		if st := s.Stats(); st.Accepted != 2 {
			t.Errorf("accepted %d connections, want 2", st.Accepted)
		}
	})
}

// TestMaxConns: a connection over MaxConns is closed at once; the ones
// being served go on.
func TestMaxConns(t *testing.T) {
	s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{MaxConns: 1})
	c := dial(t, addr)
	c.ask("api", desc("k=v"))
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	readUntilClosed(t, over, "a connection over max_conns")
	if _, err := dial(t, addr).call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}}); err == nil {
		t.Error("a gRPC client over max_conns was answered")
	}
	c.ask("api", desc("k=v"))
	if st := s.Stats(); st.Rejected < 2 || st.Active != 1 {
		t.Errorf("stats %+v, want at least 2 rejected and 1 active", st)
	}
}

// TestHealth: the health service says SERVING for the service and for
// the server as a whole, knows no other service, and turns NOT_SERVING
// when the stop begins, ending its watches so that the stop waits for no
// one.
func TestHealth(t *testing.T) {
	s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{})
	h := healthpb.NewHealthClient(h2test.GRPC(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", name, r, err)
		}
	}
	_, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"})
	wantCode(t, err, codes.NotFound, `Check("other")`)

	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", r, err)
	}
	// The watch outlives RequestTimeout's default: nothing ends it but
	// the stop.
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		stopped <- s.Shutdown(sctx)
	}()
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch on stop: %v, %v; want NOT_SERVING", r, err)
	}
	if _, err := w.Recv(); err != io.EOF {
		t.Errorf("Watch after NOT_SERVING: %v, want the end of the stream", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown with a watch open: %v, want nil (nothing cut off)", err)
	}
}

// blocking is a table whose Check waits until released.
type blocking struct {
	*bucket.Table
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blocking) Check(now time.Time, tag []byte, n int) bucket.Verdict {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
	return b.Table.Check(now, tag, n)
}

// TestShutdownAnswersInFlight: the stop answers the request being
// decided, then closes its connection.
func TestShutdownAnswersInFlight(t *testing.T) {
	tb := &blocking{Table: newTable(t, bucket.Policy{Rate: 1, Burst: 5}), entered: make(chan struct{}), release: make(chan struct{})}
	s, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	answered := make(chan error, 1)
	go func() {
		_, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}})
		answered <- err
	}()
	<-tb.entered
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- s.Shutdown(ctx)
	}()
	testkit.WaitFor(t, 10*time.Second, "the listener to close", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(tb.release)
	if err := <-answered; err != nil {
		t.Errorf("the request in flight: %v, want an answer", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if st := s.Stats(); st.Active != 0 || st.OK != 1 {
		t.Errorf("stats after the stop: %+v", st)
	}
}
