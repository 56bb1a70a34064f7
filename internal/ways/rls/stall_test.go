package rls

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// TestStalledClient: a client whose window does not let the answers be
// written, from the start (a window of 0) or once some of an answer is
// (10 bytes), has its connection closed by the watchdog (package
// h2watch, which tests the other ways a client stalls), RequestTimeout
// after its requests were taken and not before; the connection is
// counted in Stats, and nothing of the answers is sent beyond the
// window.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{RequestTimeout: timeout})
			c := dialH2(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
			start := time.Now()
			for id := uint32(1); id <= 5; id += 2 {
				c.request(id, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}})
			}
			answered, data := 0, 0
			for {
				f, err := c.next()
				if err != nil {
					break
				}
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					if f.StreamEnded() {
						t.Fatalf("stream %d ended: %v", f.StreamID, f.Fields)
					}
					answered++
				case *http2.DataFrame:
					data += len(f.Data())
				}
			}
			if took := time.Since(start); took < timeout {
				t.Errorf("closed %v after the requests, before the request timeout (%v)", took, timeout)
			}
			if answered != 3 || data > 3*int(window) {
				t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", answered, data, 3*window)
			}
			poll(t, "the connection to be freed", func() bool { return s.Stats().Active == 0 })
			if st := s.Stats(); st.Stalled != 1 || st.OK != 3 {
				t.Errorf("stats %+v, want 1 stalled connection, 3 requests decided", st)
			}
		})
	}
}

// TestMaxRequests: a request over MaxRequests in progress is answered
// RESOURCE_EXHAUSTED at once, counted; once the stalled requests' connection
// is closed, the service answers again.
func TestMaxRequests(t *testing.T) {
	s, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{MaxRequests: 2, RequestTimeout: 100 * time.Millisecond})
	c := dialH2(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}}
	c.request(1, req)
	c.request(3, req)
	poll(t, "two requests to be decided", func() bool { return s.Stats().OK == 2 })
	c.request(5, req)
	var data int
	f, err := c.nextEnd(5, &data)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerValue(f, "grpc-status"); got != "8" || !f.StreamEnded() {
		t.Errorf("the third request: grpc-status %q, ended %v; want 8 (RESOURCE_EXHAUSTED), ended", got, f.StreamEnded())
	}
	poll(t, "the stalled connection to be closed", func() bool { return s.Stats().Active == 0 })
	if r := dial(t, addr).ask("api", desc("k=v")); codesOf(r) != "OK: OK" {
		t.Errorf("after the stalled connection: %s", codesOf(r))
	}
	if st := s.Stats(); st.Busy != 1 || st.Stalled != 1 || st.OK != 3 {
		t.Errorf("stats %+v, want 1 busy, 1 stalled, 3 decided", st)
	}
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

// request sends req on stream id, failing the test on an error.
func (h *h2Conn) request(id uint32, req *rlsv3.RateLimitRequest) {
	h.t.Helper()
	must(h.t, h.send(id, req))
}

// send sends req on stream id: its headers, then its message.
func (h *h2Conn) send(id uint32, req *rlsv3.RateLimitRequest) error {
	b, err := proto.Marshal(req)
	must(h.t, err)
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
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

// headerValue is the value of field name in f, "" if it has none.
func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}
