package spoe

import (
	"net"
	"testing"
	"time"
)

// FuzzFrames hands arbitrary bytes to a connection, before and after its
// HELLO, as if read from HAProxy: whatever they hold, the agent must not
// panic, must answer within the frame size it agreed, and must keep no
// more than a frame's worth of input.
//
//	go test -run '^$' -fuzz FuzzFrames -fuzztime 1m ./internal/ways/spoe
func FuzzFrames(f *testing.F) {
	f.Add(helloFrame())
	f.Add(append(helloFrame(), notifyFrame(1, 1, kv{"tag", str("a")}, kv{"cost", u32(2)})...))
	f.Add(notifyFrame(7, 9, kv{"", ipv4(10, 0, 0, 1)}))
	f.Add(frame(frameHAProxyDisconn, flagFin, 0, 0, kvList(kv{"status-code", u32(0)})))
	f.Add(frame(frameNotify, 0, 1, 1, nil))
	f.Add([]byte{0, 0, 0, 5, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New(&recorder{}, Config{MaxFrameSize: 1024, Clock: func() time.Time { return t0 }})
		for _, hello := range []bool{false, true} {
			c := &conn{s: s, nc: discard{}, maxFrame: s.maxFrame, hello: hello}
			rest, status, err := c.handle(data)
			if err != nil {
				t.Fatalf("handle: %v", err)
			}
			if status < 0 && len(rest) > 4+c.maxFrame {
				t.Fatalf("%d bytes kept, over a frame", len(rest))
			}
			if len(c.out) >= outFlush+c.maxFrame+4 {
				t.Fatalf("%d bytes of answers held", len(c.out))
			}
			for b := c.out; len(b) > 0; {
				if len(b) < 4 {
					t.Fatalf("answer cut: % x", b)
				}
				n := int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])
				if n > c.maxFrame || 4+n > len(b) {
					t.Fatalf("answer of %d bytes, frame size %d, %d left", n, c.maxFrame, len(b))
				}
				if _, _, err := readHeader(b[4 : 4+n]); err != nil {
					t.Fatalf("answer header: %v", err)
				}
				b = b[4+n:]
			}
		}
	})
}

// discard is a net.Conn that takes every write and has nothing to read.
type discard struct{ net.Conn }

func (discard) Write(b []byte) (int, error)      { return len(b), nil }
func (discard) SetWriteDeadline(time.Time) error { return nil }
func (discard) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (discard) SetReadDeadline(time.Time) error  { return nil }
