package daemon

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/hapeers"
)

// TestHAProxyPeerSharesTheTable: an HAProxy peer's counter is charged to
// the table every way in decides from, and the verdict of a tag spent
// over the line protocol comes back as the entry's gpt0.
func TestHAProxyPeerSharesTheTable(t *testing.T) {
	r := start(t, base+"[haproxy]\nlisten = \"127.0.0.1:0\"\ntables = [\"web\"]\n", nil)
	c, err := net.Dial("tcp", r.HAProxyAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("HAProxyS 2.1\ndthrottled\nlb 42 1\n"))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); line != "200\n" {
		t.Fatalf("hello answered %q, %v", line, err)
	}
	def := hapeers.Definition{ID: 1, Name: "/web", KeyType: hapeers.KeyString, KeyLen: 32, Data: 1<<1 | 1<<2} // gpt0, gpc0
	out := hapeers.AppendDefinition(nil, def)
	out = hapeers.AppendUpdate(out, &def, 1, []byte("a"), []uint64{0, 2}) // gpt0 0, gpc0 2: two requests served
	c.Write(out)
	// Burst 3: HAProxy's 2 and this one spend it.
	if got := r.ask(t, "a"); got != "OK" {
		t.Fatalf("the line protocol: %q, want OK", got)
	}
	// The verdict comes back: an update of "a" with gpt0 set.
	var buf []byte
	for {
		m, n, err := hapeers.Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			b := make([]byte, 512)
			k, err := br.Read(b)
			if err != nil {
				t.Fatalf("no verdict pushed: %v", err)
			}
			buf = append(buf, b[:k]...)
			continue
		}
		buf = buf[n:]
		if m.Class != 10 || m.Type != 0x80 {
			continue
		}
		u, err := hapeers.DecodeUpdate(m.Type, m.Data, &hapeers.Definition{KeyType: hapeers.KeyString, KeyLen: 32, Data: 1 << 1})
		if err != nil || string(u.Key) != "a" || u.Values[1] == 0 {
			t.Fatalf("pushed %+v, %v; want a refused", u, err)
		}
		break
	}
	// Only HAProxy's two hits make the line protocol's one the last.
	if got := r.ask(t, "a"); got != "NO" {
		t.Errorf("the line protocol after HAProxy's hits and its own: %q, want NO", got)
	}
}
