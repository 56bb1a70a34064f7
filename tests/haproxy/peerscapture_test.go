package haproxy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/hapeers"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// golden is where the bytes HAProxy sends a peer are kept, for the codec's
// unit test (internal/ways/hapeers, TestGolden).
const golden = "../../internal/ways/hapeers/testdata/haproxy-2.6.bin"

// TestHAProxyPeersCapture records what Debian's HAProxy sends a peer
// listening on loopback, on the shipped haproxy-peers.cfg, while one
// client is served three requests: its hello, its resync request, its
// confirmation of the peer's "resync finished", its table's definition and
// three updates of the client's entry. It checks them byte for byte
// against the golden file (the hello's process id aside); with
// DTHROTTLE_GOLDEN=update it writes the file instead:
//
//	DTHROTTLE_GOLDEN=update go test ./tests/haproxy -run TestHAProxyPeersCapture
func TestHAProxyPeersCapture(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	harness.Must(t, err)
	defer l.Close()
	p := harness.StartHAProxyPeers(t, harness.PeersOptions{Dthrottled: l.Addr().String()})
	l.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("HAProxy did not connect: %v\n%s", err, p.Output())
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	read := func(enough func([]byte) bool) {
		t.Helper()
		for !enough(got) {
			var b [4096]byte
			n, err := c.Read(b[:])
			if err != nil {
				t.Fatalf("reading HAProxy: %v; got % x", err, got)
			}
			got = append(got, b[:n]...)
		}
	}
	read(func(b []byte) bool { return bytes.Count(b, []byte("\n")) >= 3 })
	_, err = c.Write([]byte("200\n"))
	harness.Must(t, err)
	hello := bytes.Index(got, []byte(" 1\n")) + 3
	read(func(b []byte) bool { return len(b) >= hello+2 }) // the resync request
	_, err = c.Write([]byte{0, 1})                         // resync finished
	harness.Must(t, err)
	client := harness.ClientFrom("127.0.0.1")
	for range 3 {
		if code, _ := harness.Status(t, client, p.URL); code != 200 {
			t.Fatalf("request served %d", code)
		}
	}
	read(func(b []byte) bool { return lastCount(t, b[hello:]) == 3 })
	got = regexp.MustCompile(`\n(\S+) \d+ 1\n`).ReplaceAll(got, []byte("\n$1 1 1\n"))
	if os.Getenv("DTHROTTLE_GOLDEN") == "update" {
		harness.Must(t, os.WriteFile(golden, got, 0o644))
		return
	}
	want, err := os.ReadFile(golden)
	harness.Must(t, err)
	// HAProxy sends an entry once however often it changed since its last
	// push, and its confirmation of the resync whenever its task runs, so
	// the updates and the order depend on timing: the hello, the control
	// messages and the definition must be the golden file's, byte for
	// byte, and the updates must decode (lastCount).
	if g, w := fixed(t, got), fixed(t, want); g != w {
		t.Errorf("HAProxy sent\n%s\nthe golden file holds\n%s\n(DTHROTTLE_GOLDEN=update rewrites it)", g, w)
	}
}

// fixed is what of a capture does not depend on timing: the hello, the
// control messages in order and the definition, in hex.
func fixed(t *testing.T, b []byte) string {
	t.Helper()
	hello := bytes.Index(b, []byte(" 1\n")) + 3
	out := fmt.Sprintf("% x |", b[:hello])
	var def string
	for b = b[hello:]; ; {
		m, k, err := hapeers.Decode(b)
		if err != nil || k == 0 {
			return out + " definition " + def
		}
		switch {
		case m.Class == 0:
			out += fmt.Sprintf(" control %d", m.Type)
		case m.Type == 0x82:
			def = fmt.Sprintf("% x", b[:k])
		}
		b = b[k:]
	}
}

// lastCount decodes the messages in b (whole, or a cut one at the end)
// after the hello: the definition of the shipped table, then updates of
// the entry of 127.0.0.1, whose gpc0 it returns from the last one (0
// before any).
func lastCount(t *testing.T, b []byte) uint64 {
	t.Helper()
	var def *hapeers.Definition
	var count uint64
	for {
		m, k, err := hapeers.Decode(b)
		if err != nil {
			t.Fatalf("HAProxy sent a message the decoder refuses: %v", err)
		}
		if k == 0 {
			return count
		}
		b = b[k:]
		switch {
		case m.Class != 10:
		case m.Type == 0x82:
			d, err := hapeers.DecodeDefinition(m.Data)
			if err != nil || d.Name != "/web" || d.KeyType != hapeers.KeyIPv4 || d.Expire != 60000 {
				t.Fatalf("HAProxy's definition %+v, %v", d, err)
			}
			def = &d
		case m.Type == 0x80 || m.Type == 0x81:
			u, err := hapeers.DecodeUpdate(m.Type, m.Data, def)
			if def == nil || err != nil || !bytes.Equal(u.Key, []byte{127, 0, 0, 1}) || u.Values[2] <= count {
				t.Fatalf("HAProxy's update %+v, %v, after gpc0 %d", u, err, count)
			}
			count = u.Values[2] // gpc0
		}
	}
}
