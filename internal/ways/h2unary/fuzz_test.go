package h2unary

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// FuzzConn feeds a connection the client's preface and then any bytes:
// the server must neither panic nor hang, and once the client is gone it
// holds no call in progress. The seeds are a client's first frames and
// calls, whole, cut short and spoiled.
func FuzzConn(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
		if len(seed) > 20 {
			f.Add(seed[:len(seed)/2])
			spoiled := bytes.Clone(seed)
			spoiled[len(spoiled)/3] ^= 0xff
			f.Add(spoiled)
		}
	}
	s := New(Config{Methods: testMethods(nil), MaxMessageBytes: 1 << 10, MaxStreams: 4, MaxHeaderBytes: 1 << 10,
		HandshakeTimeout: time.Second, RequestTimeout: time.Second, IdleTimeout: time.Second})
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			s.ServeConn(context.Background(), server)
			server.Close()
		}()
		read := make(chan struct{})
		go func() {
			defer close(read)
			io.Copy(io.Discard, client)
		}()
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		client.Write(append([]byte(http2.ClientPreface), in...))
		client.Close()
		<-served
		<-read
		if n := s.InProgress(); n != 0 {
			t.Fatalf("%d calls in progress after the connection ended", n)
		}
	})
}

// fuzzSeeds are byte streams a client sends after its preface.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	frames := func(write func(fr *http2.Framer, block func(path string, extra ...hpack.HeaderField) []byte)) {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		block := func(path string, extra ...hpack.HeaderField) []byte {
			hb.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "fuzz"},
				{":path", path}, {"content-type", "application/grpc"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			for _, f := range extra {
				enc.WriteField(f)
			}
			return bytes.Clone(hb.Bytes())
		}
		must(t, fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}))
		write(fr, block)
		seeds = append(seeds, b.Bytes())
	}
	call := func(fr *http2.Framer, id uint32, block []byte, msg []byte) {
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}))
		must(t, fr.WriteData(id, true, msg))
	}
	frames(func(fr *http2.Framer, block func(string, ...hpack.HeaderField) []byte) {
		call(fr, 1, block(echoMethod), h2test.Message(echo(300)))
		call(fr, 3, block(failMethod), h2test.Message(echo(0)))
		call(fr, 5, block("/nothing"), nil)
	})
	frames(func(fr *http2.Framer, block func(string, ...hpack.HeaderField) []byte) {
		b := block(echoMethod, hpack.HeaderField{Name: "x-pad", Value: "padding"})
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:5]}))
		must(t, fr.WriteContinuation(1, true, b[5:]))
		must(t, fr.WriteDataPadded(1, false, h2test.Message(echo(10))[:7], []byte{0, 0, 0}))
		must(t, fr.WriteWindowUpdate(0, 1000))
		must(t, fr.WriteWindowUpdate(1, 1000))
		must(t, fr.WritePing(false, [8]byte{1}))
		must(t, fr.WritePriority(1, http2.PriorityParam{StreamDep: 3, Weight: 7}))
		must(t, fr.WriteRSTStream(1, http2.ErrCodeCancel))
		must(t, fr.WriteRawFrame(0x42, 0, 0, []byte("unknown")))
		must(t, fr.WriteGoAway(1, http2.ErrCodeNo, nil))
	})
	frames(func(fr *http2.Framer, block func(string, ...hpack.HeaderField) []byte) {
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(echoMethod), EndHeaders: true}))
		must(t, fr.WriteData(1, false, []byte{1, 0, 0, 0, 1, 0}))
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(echoMethod), EndHeaders: true}))
		must(t, fr.WriteData(3, false, []byte{0, 0xff, 0, 0, 0}))
		must(t, fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}))
	})
	return seeds
}
