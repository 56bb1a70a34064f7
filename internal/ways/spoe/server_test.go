package spoe

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

func TestHello(t *testing.T) {
	_, addr := start(t, Config{MaxFrameSize: 4096})
	c := dial(t, addr)
	send(t, c, helloFrame())
	f := readFrame(t, c)
	if f.h.typ != frameAgentHello || f.h.flags != flagFin || f.h.streamID != 0 || f.h.frameID != 0 {
		t.Fatalf("header %+v", f.h)
	}
	m := kvs(t, f.payload)
	if string(m["version"].bytes) != "2.0" || m["max-frame-size"].num != 4096 || string(m["capabilities"].bytes) != "pipelining,async" {
		t.Errorf("AGENT-HELLO %+v", m)
	}
}

func TestHelloAgreesOnSmallerFrameAndCommonCapabilities(t *testing.T) {
	_, addr := start(t, Config{})
	c := dial(t, addr)
	send(t, c, frame(frameHAProxyHello, flagFin, 0, 0, kvList(
		kv{"supported-versions", str(" 1.0 , 2.0 ")}, kv{"max-frame-size", u32(300)}, kv{"capabilities", str("fragmentation, pipelining")})))
	m := kvs(t, readFrame(t, c).payload)
	if m["max-frame-size"].num != 300 || string(m["capabilities"].bytes) != "pipelining" {
		t.Errorf("AGENT-HELLO %+v", m)
	}
}

func TestHealthCheck(t *testing.T) {
	s, addr := start(t, Config{})
	c := dial(t, addr)
	send(t, c, helloFrame(kv{"healthcheck", boolean(true)}))
	if f := readFrame(t, c); f.h.typ != frameAgentHello {
		t.Fatalf("frame type %d, want AGENT-HELLO", f.h.typ)
	}
	wantClosed(t, c)
	if s.Stats().HealthChecks != 1 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestBurstThenRefused(t *testing.T) {
	s, addr := start(t, Config{})
	c := handshake(t, addr)
	want := []map[string]string{
		{"allowed": "1", "ratelimit": `"default";r=2;t=2`, "ratelimit_policy": `"default";q=3;w=6`},
		{"allowed": "1", "ratelimit": `"default";r=1;t=4`, "ratelimit_policy": `"default";q=3;w=6`},
		{"allowed": "1", "ratelimit": `"default";r=0;t=6`, "ratelimit_policy": `"default";q=3;w=6`},
		{"allowed": "0", "ratelimit": `"default";r=0;t=6`, "ratelimit_policy": `"default";q=3;w=6`, "retry_after": "2"},
	}
	for i, w := range want {
		send(t, c, notifyFrame(uint64(10+i), 1, kv{"tag", str("192.0.2.1")}))
		f := readFrame(t, c)
		if f.h.typ != frameAck || f.h.streamID != uint64(10+i) || f.h.frameID != 1 || f.h.flags != flagFin {
			t.Fatalf("step %d: header %+v", i, f.h)
		}
		if got := vars(t, f.payload); !equal(got, w) {
			t.Errorf("step %d: got %v want %v", i, got, w)
		}
	}
	if st := s.Stats(); st.Allowed != 3 || st.Refused != 1 || st.Notifies != 4 || st.Frames != 5 || st.Active != 1 {
		t.Errorf("stats %+v", st)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestPipelinedFramesAnsweredInOrderOfArrival(t *testing.T) {
	_, addr := start(t, Config{})
	c := handshake(t, addr)
	var all [][]byte
	for i := range 200 {
		all = append(all, notifyFrame(uint64(i), uint64(i%7), kv{"tag", str("t" + itoa(uint64(i)))}))
	}
	send(t, c, all...) // one write: the agent answers them in one batch or a few
	for i := range 200 {
		f := readFrame(t, c)
		if f.h.typ != frameAck || f.h.streamID != uint64(i) || f.h.frameID != uint64(i%7) {
			t.Fatalf("ack %d: header %+v", i, f.h)
		}
		if vars(t, f.payload)["allowed"] != "1" {
			t.Fatalf("ack %d refused", i)
		}
	}
}

func TestTags(t *testing.T) {
	r := &recorder{}
	s, addr := startWith(t, r, Config{})
	c := handshake(t, addr)
	v6 := append([]byte{typeIPv6}, net.ParseIP("2001:db8::1")...)
	send(t, c,
		notifyFrame(1, 1, kv{"tag", str("key-1")}),
		notifyFrame(2, 1, kv{"", ipv4(192, 0, 2, 7)}),
		notifyFrame(3, 1, kv{"x", str("ignored")}, kv{"tag", v6}),
		notifyFrame(4, 1, kv{"tag", appendVarint([]byte{typeInt64}, 1<<64-5)}),
		notifyFrame(5, 1, kv{"tag", u32(42)}, kv{"cost", u32(5)}),
		notifyFrame(6, 1, kv{"tag", []byte{typeNull}}),
		notifyFrame(7, 1, kv{"tag", appendTypedString(nil, bytes.Repeat([]byte("x"), 1000))}),
	)
	for range 7 {
		readFrame(t, c)
	}
	want := []string{"key-1", "192.0.2.7", "2001:db8::1", "-5", "42", "", strings.Repeat("x", 1000)}
	if strings.Join(r.tags, "|") != strings.Join(want, "|") {
		t.Errorf("tags %q\nwant %q", r.tags, want)
	}
	if r.costs[4] != 5 || r.costs[0] != 1 {
		t.Errorf("costs %v", r.costs)
	}
	if s.Stats().Bad != 0 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestMessagesNotDecided(t *testing.T) {
	r := &recorder{}
	s, addr := startWith(t, r, Config{})
	c := handshake(t, addr)
	send(t, c,
		notifyFrame(1, 1), // no argument
		notifyFrame(2, 1, kv{"tag", boolean(true)}),                  // no tag made of a boolean
		notifyFrame(3, 1, kv{"tag", str("a")}, kv{"cost", u32(0)}),   // cost out of range
		notifyFrame(4, 1, kv{"tag", str("a")}, kv{"cost", str("2")}), // cost not an integer
		notifyFrame(5, 1, kv{"tag", str("a")}, kv{"cost", u32(MaxCost + 1)}),
	)
	for i := range 5 {
		f := readFrame(t, c)
		if f.h.typ != frameAck || len(f.payload) != 0 {
			t.Errorf("ack %d: %+v, want an ACK with no action", i, f)
		}
	}
	if len(r.tags) != 0 || s.Stats().Bad != 5 {
		t.Errorf("asked %q; stats %+v", r.tags, s.Stats())
	}
}

func TestAckNeverPassesTheFrameSize(t *testing.T) {
	s, addr := start(t, Config{})
	c := dial(t, addr)
	send(t, c, frame(frameHAProxyHello, flagFin, 0, 0, kvList(
		kv{"supported-versions", str("2.0")}, kv{"max-frame-size", u32(4096)}, kv{"capabilities", str("pipelining")})))
	readFrame(t, c)
	var p []byte
	for range 400 { // 400 messages in one NOTIFY of 4000 bytes
		p = appendString(p, "m")
		p = append(p, 1)
		p = append(p, kvList(kv{"tag", str("a")})...)
	}
	send(t, c, frame(frameNotify, flagFin, 1, 1, p))
	f := readFrame(t, c)
	if n := len(f.payload); n > 4096 {
		t.Errorf("ACK payload of %d bytes, over the agreed 4096", n)
	}
	st := s.Stats()
	if st.Allowed+st.Refused+st.Bad != 400 || st.Bad == 0 || st.Allowed != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hello  bool // the HELLO first
		input  []byte
		status int
	}{
		{"notify before hello", false, notifyFrame(1, 1, kv{"tag", str("a")}), statusInvalid},
		{"garbage", false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), statusTooBig},
		{"a frame shorter than its header", false, []byte{0, 0, 0, 1, 1}, statusInvalid},
		{"a header cut short", false, []byte{0, 0, 0, 5, frameHAProxyHello, 0, 0, 0, flagFin}, statusInvalid},
		{"over the frame size", true, append([]byte{0, 0, 0x40, 0}, make([]byte, 100)...), statusTooBig},
		{"no version", false, frame(frameHAProxyHello, flagFin, 0, 0, kvList(kv{"max-frame-size", u32(1000)}, kv{"capabilities", str("")})), statusNoVersion},
		{"no frame size", false, frame(frameHAProxyHello, flagFin, 0, 0, kvList(kv{"supported-versions", str("2.0")}, kv{"capabilities", str("")})), statusNoFrameSize},
		{"no capabilities", false, frame(frameHAProxyHello, flagFin, 0, 0, kvList(kv{"supported-versions", str("2.0")}, kv{"max-frame-size", u32(1000)})), statusNoCaps},
		{"version 1 only", false, frame(frameHAProxyHello, flagFin, 0, 0, kvList(kv{"supported-versions", str("1.0")}, kv{"max-frame-size", u32(1000)}, kv{"capabilities", str("")})), statusBadVersion},
		{"frame size under 256", false, frame(frameHAProxyHello, flagFin, 0, 0, kvList(kv{"supported-versions", str("2.0")}, kv{"max-frame-size", u32(255)}, kv{"capabilities", str("")})), statusBadSize},
		{"hello twice", true, helloFrame(), statusInvalid},
		{"a fragment", true, frame(frameNotify, 0, 1, 1, nil), statusNoFragments},
		{"an unset frame", true, frame(frameUnset, flagFin, 1, 1, nil), statusNoFragments},
		{"a malformed notify", true, frame(frameNotify, flagFin, 1, 1, []byte{5, 'a'}), statusInvalid},
		{"a bad kv in the hello", false, frame(frameHAProxyHello, flagFin, 0, 0, []byte{3, 'a', 'b', 'c', 12}), statusInvalid},
		{"haproxy disconnects", true, frame(frameHAProxyDisconn, flagFin, 0, 0, kvList(kv{"status-code", u32(0)}, kv{"message", str("bye")})), statusNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, addr := start(t, Config{MaxFrameSize: 1024})
			var c net.Conn
			if tc.hello {
				c = handshake(t, addr)
			} else {
				c = dial(t, addr)
			}
			send(t, c, tc.input)
			wantDisconnect(t, c, tc.status)
			// The server goes on serving others.
			c2 := handshake(t, addr)
			send(t, c2, notifyFrame(1, 1, kv{"tag", str("b")}))
			if f := readFrame(t, c2); f.h.typ != frameAck {
				t.Errorf("next connection: frame type %d", f.h.typ)
			}
			testkit.WaitFor(t, 5*time.Second, "the bad connection closed", func() bool { return s.Stats().Active == 1 })
		})
	}
}

func TestUnknownFrameSkipped(t *testing.T) {
	_, addr := start(t, Config{})
	c := handshake(t, addr)
	send(t, c, frame(42, flagFin, 1, 1, []byte("whatever")), notifyFrame(2, 1, kv{"tag", str("a")}))
	if f := readFrame(t, c); f.h.typ != frameAck || f.h.streamID != 2 {
		t.Errorf("%+v", f.h)
	}
}

func TestTooManyConnections(t *testing.T) {
	s, addr := start(t, Config{MaxConns: 1})
	c1 := handshake(t, addr)
	c2 := dial(t, addr)
	send(t, c2, helloFrame())
	wantDisconnect(t, c2, statusResources)
	send(t, c1, notifyFrame(1, 1, kv{"tag", str("a")}))
	if f := readFrame(t, c1); f.h.typ != frameAck {
		t.Errorf("first connection: frame type %d", f.h.typ)
	}
	if st := s.Stats(); st.Rejected != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
	c1.Close()
	testkit.WaitFor(t, 5*time.Second, "the slot freed", func() bool { return s.Stats().Active == 0 })
	handshake(t, addr)
}

// TestTimeouts, on fake time: a HELLO that does not come, a frame begun
// and not finished, and a connection idle are each disconnected
// (TIMEOUT) exactly their timeout after the connection, the frame's
// first bytes or the last answer; a reader slower than WriteTimeout is
// closed exactly WriteTimeout after the write that found its buffers
// full, counted a write error.
func TestTimeouts(t *testing.T) {
	const timeout = 20 * time.Millisecond
	exactly := func(t *testing.T, start time.Time) {
		t.Helper()
		if took := time.Since(start); took != timeout {
			t.Errorf("disconnected after %v, want the timeout (%v)", took, timeout)
		}
	}
	t.Run("hello", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, l := startMem(t, Config{HelloTimeout: timeout})
			start := time.Now()
			c := dialMem(t, l)
			wantDisconnect(t, c, statusTimeout)
			exactly(t, start)
			if s.Stats().Timeouts != 1 {
				t.Errorf("stats %+v", s.Stats())
			}
		})
	})
	t.Run("a frame begun", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, l := startMem(t, Config{FrameTimeout: timeout})
			c := hello(t, dialMem(t, l))
			time.Sleep(time.Minute) // idle (within IdleTimeout) is not a frame begun
			start := time.Now()
			send(t, c, notifyFrame(1, 1, kv{"tag", str("a")})[:7])
			wantDisconnect(t, c, statusTimeout)
			exactly(t, start)
		})
	})
	t.Run("idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, l := startMem(t, Config{IdleTimeout: timeout})
			c := hello(t, dialMem(t, l))
			start := time.Now()
			wantDisconnect(t, c, statusTimeout)
			exactly(t, start)
		})
	})
	t.Run("a slow reader", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, l := startMem(t, Config{WriteTimeout: timeout})
			c, server := testkit.Pipe()
			t.Cleanup(func() { c.Close() })
			c.SetReadBuffer(1 << 10)
			server.SetWriteBuffer(1 << 10)
			if err := l.Offer(server); err != nil {
				t.Fatal(err)
			}
			hello(t, c)
			var notifies []byte
			for i := range 100 { // 100 ACKs: more than 2 KiB
				notifies = append(notifies, notifyFrame(uint64(i+1), 1, kv{"tag", str("a")})...)
			}
			start := time.Now()
			send(t, c, notifies)
			time.Sleep(timeout - time.Nanosecond)
			synctest.Wait()
			if st := s.Stats(); st.WriteErrors != 0 || st.Active != 1 {
				t.Fatalf("a nanosecond before the write timeout: stats %+v, want no write error, 1 active", st)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if st := s.Stats(); st.WriteErrors != 1 || st.Active != 0 {
				t.Errorf("at the write timeout, %v after the NOTIFYs: stats %+v, want 1 write error, none active", time.Since(start), st)
			}
		})
	})
}

func TestShutdownDisconnects(t *testing.T) {
	s, addr := start(t, Config{})
	c := handshake(t, addr)
	send(t, c, notifyFrame(1, 1, kv{"tag", str("a")}))
	readFrame(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wantDisconnect(t, c, statusNormal)
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Shutdown")
	}
}
