package h2watch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoMethod answers a BytesValue with itself: an answer as large as the
// test asks.
const echoMethod = "/h2watch.test.Echo/Echo"

var echoDesc = grpc.ServiceDesc{
	ServiceName: "h2watch.test.Echo",
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

// startServer serves the echo and health services on l (127.0.0.1:0 if
// nil), each connection watched by a Watchdog of timeout, until the test
// ends; it returns the watchdog and the address.
func startServer(t testing.TB, timeout time.Duration, l net.Listener) (*Watchdog, string) {
	t.Helper()
	if l == nil {
		var err error
		l, err = net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
	}
	dog := New(timeout)
	srv := grpc.NewServer()
	srv.RegisterService(&echoDesc, struct{}{})
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
	return dog, l.Addr().String()
}

// h2Conn is an HTTP/2 client connection written frame by frame.
type h2Conn struct {
	t   testing.TB
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// dialH2 connects to addr and sends the preface with settings.
func dialH2(t testing.TB, addr string, settings ...http2.Setting) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return newH2(t, c, settings...)
}

func newH2(t testing.TB, c net.Conn, settings ...http2.Setting) *h2Conn {
	t.Helper()
	h := &h2Conn{t: t, c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.hb)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_, err := io.WriteString(c, http2.ClientPreface)
	must(t, err)
	must(t, h.fr.WriteSettings(settings...))
	return h
}

// request sends an echo of n bytes on stream id, failing the test on an
// error.
func (h *h2Conn) request(id uint32, n int) {
	h.t.Helper()
	must(h.t, h.send(id, n))
}

// send sends an echo of n bytes on stream id: its headers, then its
// message.
func (h *h2Conn) send(id uint32, n int) error {
	b, err := proto.Marshal(wrapperspb.Bytes(bytes.Repeat([]byte("e"), n)))
	must(h.t, err)
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "h2watch"},
		{":path", echoMethod}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return h.fr.WriteData(id, true, append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...))
}

// next returns the server's next frame, having acknowledged its SETTINGS
// and PINGs; an error once the connection ends.
func (h *h2Conn) next() (http2.Frame, error) {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
			}
			continue
		}
		return f, nil
	}
}

// nextEnd reads until stream id's last headers (its trailers, or headers
// that end it at once), adding the DATA bytes read to *data; an error
// once the connection ends.
func (h *h2Conn) nextEnd(id uint32, data *int) (*http2.MetaHeadersFrame, error) {
	for {
		f, err := h.next()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			*data += int(f.Length)
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return f, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return nil, errors.New("stream reset: " + f.ErrCode.String())
			}
		}
	}
}

// dialConn is a gRPC client connection to addr, closed when the test
// ends.
func dialConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// poll waits until cond holds, failing the test after 10s.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
