package gubernator

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// TestStalledClient: a gRPC client that announces a window of 0, so that
// no answer can be sent, has its connection closed by the watchdog
// (package h2watch, which tests the other ways a client stalls),
// RequestTimeout after its calls were taken and not before; the
// connection is counted in Stats, and its calls were answered.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	s, grpcAddr, _ := startServer(t, counting(3), Config{RequestTimeout: timeout})
	c, err := net.Dial("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	b, err := proto.Marshal(&guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: "n", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	start := time.Now()
	for id := uint32(1); id <= 5; id += 2 {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "gubernator"},
			{":path", guber.V1_GetRateLimits_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(id, true, append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...))
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				t.Fatalf("stream %d ended: %v", f.StreamID, f.Fields)
			}
		}
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("closed %v after the calls, before the request timeout (%v)", took, timeout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection was not freed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.Stats(); st.Stalled != 1 || st.Calls != 3 {
		t.Errorf("stats %+v, want 1 stalled connection, 3 calls answered", st)
	}
}
