package hostile

import (
	"bufio"
	"bytes"
	binenc "encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// This file holds the gRPC clients that never let an answer be written,
// for every gRPC way in (rls_stall_test.go, gubernator_stall_test.go):
// HTTP/2 connections that announce a flow-control window of 0
// (SETTINGS_INITIAL_WINDOW_SIZE = 0), so that no reply's message can
// ever be sent, and note what becomes of each stream they open.

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
// calls of method with msg (a gRPC message: grpcMessage), on streams 1,
// 3, 5...
func dialStalledH2(t *testing.T, addr, method string, msg []byte, n int) *stalledH2 {
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
	for i := range n {
		id := uint32(2*i + 1)
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", method}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
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

// stallOutcome is what became of stalled clients' streams.
type stallOutcome struct {
	held    time.Duration  // the longest a stream was held, from its answer's headers to its end
	last    time.Duration  // when the last stream ended, after the start
	streams map[string]int // streams by how they ended
	closed  int            // connections that ended with streams open
}

// awaitStalled waits until every stream of clients has ended, failing
// the test if one has not by within, and returns what became of them.
func awaitStalled(t *testing.T, clients []*stalledH2, start, within time.Time) stallOutcome {
	t.Helper()
	o := stallOutcome{streams: map[string]int{}}
	for i, c := range clients {
		if !c.await(within) {
			t.Fatalf("client %d: %d of %d streams still open %v after the start", i, c.openStreams(), len(c.streams), time.Since(start).Round(time.Millisecond))
		}
		for _, s := range c.streams {
			o.held = max(o.held, s.ended.Sub(s.taken))
			o.last = max(o.last, s.ended.Sub(start))
			o.streams[s.how]++
		}
		if c.closed {
			o.closed++
		}
	}
	return o
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
