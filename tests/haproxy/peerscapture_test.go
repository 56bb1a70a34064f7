package haproxy

import (
	"bytes"
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
	read(func(b []byte) bool { return updates(b[hello:]) == 3 })
	got = regexp.MustCompile(`\n(\S+) \d+ 1\n`).ReplaceAll(got, []byte("\n$1 1 1\n"))
	if os.Getenv("DTHROTTLE_GOLDEN") == "update" {
		harness.Must(t, os.WriteFile(golden, got, 0o644))
		return
	}
	want, err := os.ReadFile(golden)
	harness.Must(t, err)
	if !bytes.Equal(got, want) {
		t.Errorf("HAProxy sent\n% x\nthe golden file holds\n% x\n(DTHROTTLE_GOLDEN=update rewrites it)", got, want)
	}
}

// updates counts the update messages in b, a stream of whole messages or
// a cut one at its end.
func updates(b []byte) int {
	n := 0
	for {
		m, k, err := hapeers.Decode(b)
		if err != nil || k == 0 {
			return n
		}
		if m.Class == 10 && m.Type == 0x80 || m.Type == 0x81 {
			n++
		}
		b = b[k:]
	}
}
