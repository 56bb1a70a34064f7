package hostile

import (
	"bufio"
	"bytes"
	"context"
	binenc "encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// This file measures what clients that never let the rate limit service
// answer cost it: HTTP/2 connections that announce a flow-control window
// of 0 (SETTINGS_INITIAL_WINDOW_SIZE = 0), so that no reply's message can
// ever be sent, and then ask on more streams than a connection may hold.

// rlsStallConfig serves the rate limit service on its defaults, with an
// allow policy for the stalled clients' descriptor, so that the table
// keeps nothing for them and the memory measured is the service's.
const rlsStallConfig = `
[listen]
unix = "%SOCK%"
[[policy]]
name = "stall"
prefix = "rls:stall|"
action = "allow"
[admin]
http = "127.0.0.1:0"
[rls]
listen = "127.0.0.1:0"
`

// rlsRequestTimeout is the rate limit service's request timeout, which
// docs/integrations/envoy.md promises.
const rlsRequestTimeout = 5 * time.Second

// TestRLSStalledClients opens 1,000 connections to the rate limit service
// that announce a window of 0 and send 110 requests each (10 more than a
// connection may have in progress), so that no answer can ever be sent
// whole: the daemon's memory grows by less than 100 MiB; every stream
// ends (refused at once, or its connection closed) within the request
// timeout of the daemon taking it (its answer's headers, which the window
// does not hold back); the refusals and the closed connections are
// counted; and the service answers an ordinary client afterwards.
func TestRLSStalledClients(t *testing.T) {
	harness.Alone(t)
	const perConn = 110
	n := connsAllowed(t, 1000)
	harness.RequireRLS(t, rlsStallConfig)
	config, addr := harness.PinPort(t, rlsStallConfig, "listen")
	d := harness.StartDaemon(t, config)
	admin := d.AdminAddr(t)
	pid := d.Cmd.Process.Pid
	rss0 := rssKiB(t, pid)

	start := time.Now()
	clients := make([]*stalledH2, n)
	for i := range clients {
		clients[i] = dialStalledH2(t, addr, perConn)
	}
	sent := time.Since(start)
	// Each client's streams end, or the test fails after the request
	// timeout and as long again for the daemon to take 110,000 requests.
	within := time.Now().Add(2*rlsRequestTimeout + 10*time.Second)
	var held, last time.Duration // the longest a stream was held; when the last ended
	outcomes := map[string]int{}
	stalledConns := 0
	for i, c := range clients {
		if !c.await(within) {
			t.Fatalf("client %d: %d of %d streams still open %v after the start", i, c.openStreams(), perConn, time.Since(start).Round(time.Millisecond))
		}
		for _, s := range c.streams {
			held = max(held, s.ended.Sub(s.taken))
			last = max(last, s.ended.Sub(start))
			outcomes[s.how]++
		}
		if c.closed {
			stalledConns++
		}
	}
	peak := peakRSSKiB(t, pid)
	fams := harness.Scrape(t, admin)
	busy, stalled := harness.Metric(t, fams, "dthrottle_rls_busy_total"), harness.Metric(t, fams, "dthrottle_rls_connections_stalled_total")
	t.Logf("%d connections x %d requests sent in %v: daemon RSS %d KiB, peak +%d KiB (%d B a connection); streams %v, held at most %v; the last ended %v after the start; %v refused busy and %v connections closed stalled, as counted",
		n, perConn, sent.Round(time.Millisecond), rss0, peak-rss0, (peak-rss0)*1024/int64(n), outcomes,
		held.Round(time.Millisecond), last.Round(time.Millisecond), busy, stalled)
	if growth := peak - rss0; growth >= 100<<10 {
		t.Errorf("the daemon's memory grew by %d KiB, want under 100 MiB", growth)
	}
	if held > rlsRequestTimeout+time.Second {
		t.Errorf("a stream was held %v, want within the request timeout (%v) and a second", held, rlsRequestTimeout)
	}
	if int(busy) != outcomes["busy"] || int(stalled) != stalledConns {
		t.Errorf("the daemon counted %v refused busy and %v connections stalled; the clients saw %d and %d", busy, stalled, outcomes["busy"], stalledConns)
	}
	if outcomes["closed"] == 0 || outcomes["busy"] == 0 {
		t.Errorf("streams %v: want some refused busy and some closed with their connection", outcomes)
	}
	for _, c := range clients {
		c.c.Close()
	}
	awaitMetric(t, admin, "dthrottle_rls_connections", 0)
	if r := askRLSGo(t, addr, "api", "generic_key=after"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("after the stalled clients: %v, want OK", r.GetOverallCode())
	}
}

// stalledH2 is an HTTP/2 client connection that announced a window of 0:
// it reads what the server sends, acknowledging its SETTINGS and PINGs,
// never opens its window, and notes what becomes of each stream.
type stalledH2 struct {
	c       net.Conn
	mu      sync.Mutex
	streams map[uint32]*h2Stream
	open    int           // streams not ended
	closed  bool          // the connection ended with streams open
	done    chan struct{} // closed once every stream has ended
}

// h2Stream is what a client saw of one stream.
type h2Stream struct {
	taken time.Time // the server's first frame on it: its answer's headers, or its end
	ended time.Time
	how   string // "busy" (RESOURCE_EXHAUSTED), "grpc-status N", "refused" (REFUSED_STREAM), "reset", "closed" (with the connection, or by GOAWAY)
}

// dialStalledH2 connects to addr, announces a window of 0 and sends n
// ShouldRateLimit requests, on streams 1, 3, 5...
func dialStalledH2(t *testing.T, addr string, n int) *stalledH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &stalledH2{c: c, streams: make(map[uint32]*h2Stream, n), open: n, done: make(chan struct{})}
	w := bufio.NewWriter(c)
	w.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(w, nil)
	harness.Must(t, fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}))
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	msg := grpcMessage(t, &rlsv3.RateLimitRequest{Domain: "stall",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	for i := range n {
		id := uint32(2*i + 1)
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		harness.Must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}))
		harness.Must(t, fr.WriteData(id, true, msg))
		s.streams[id] = &h2Stream{}
	}
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	harness.Must(t, w.Flush())
	go s.read()
	return s
}

// grpcMessage is m as a gRPC message: uncompressed, its length, its bytes.
func grpcMessage(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	harness.Must(t, err)
	return append(binenc.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

// read reads frames until the connection ends, acknowledging SETTINGS
// and PINGs, and noting each stream's answer and end.
func (s *stalledH2) read() {
	w := bufio.NewWriter(s.c)
	fr := http2.NewFramer(w, s.c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			s.end(func(uint32) bool { return true }, "closed")
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			s.take(f.StreamID)
			if f.StreamEnded() {
				how := "grpc-status " + headerValue(f, "grpc-status")
				if how == "grpc-status 8" {
					how = "busy"
				}
				s.end(func(id uint32) bool { return id == f.StreamID }, how)
			}
		case *http2.RSTStreamFrame:
			how := "reset"
			if f.ErrCode == http2.ErrCodeRefusedStream {
				how = "refused"
			}
			s.end(func(id uint32) bool { return id == f.StreamID }, how)
		case *http2.GoAwayFrame:
			s.end(func(id uint32) bool { return id > f.LastStreamID }, "closed")
		}
		if w.Buffered() > 0 && w.Flush() != nil {
			s.end(func(uint32) bool { return true }, "closed")
			return
		}
	}
}

// headerValue is the value of the field name in f, "" if it has none.
func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// take notes the server's first frame on stream id.
func (s *stalledH2) take(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil && st.taken.IsZero() {
		st.taken = time.Now()
	}
}

// end ends the open streams that match, as how.
func (s *stalledH2) end(match func(id uint32) bool, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id, st := range s.streams {
		if !st.ended.IsZero() || !match(id) {
			continue
		}
		if st.taken.IsZero() {
			st.taken = now
		}
		st.ended, st.how = now, how
		s.open--
		if how == "closed" {
			s.closed = true
		}
		if s.open == 0 {
			close(s.done)
		}
	}
}

// await waits until every stream has ended, reporting false if that is
// not so by deadline.
func (s *stalledH2) await(deadline time.Time) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(time.Until(deadline)):
		return false
	}
}

// openStreams is the number of streams not ended.
func (s *stalledH2) openStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// peakRSSKiB returns the most resident memory process pid has had
// (VmHWM), in KiB.
func peakRSSKiB(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := readStatusKiB(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// askRLSGo asks the rate limit service on addr about one descriptor of
// "key=value" entries, through grpc-go, and returns the answer.
func askRLSGo(t *testing.T, addr, domain string, entries ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	harness.Must(t, err)
	defer cc.Close()
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	harness.Must(t, err)
	return r
}
