package daemon

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// spopFrame builds an unfragmented SPOP frame whose stream and frame ids
// are below 240 (one byte each).
func spopFrame(typ, streamID byte, payload ...[]byte) []byte {
	b := []byte{0, 0, 0, 0, typ, 0, 0, 0, 1, streamID, 1}
	for _, p := range payload {
		b = append(b, p...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// spopStr is a name (typed is false) or a typed string shorter than 240.
func spopStr(s string, typed bool) []byte {
	b := []byte{byte(len(s))}
	if typed {
		b = []byte{8, byte(len(s))}
	}
	return append(b, s...)
}

// readSPOP reads one frame and returns its type and payload, as text.
func readSPOP(t *testing.T, c net.Conn) (byte, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	f := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, f); err != nil {
		t.Fatal(err)
	}
	return f[0], string(f[7:]) // type, flags, one-byte ids
}

func TestSPOESharesTheTable(t *testing.T) {
	r := start(t, base+"[spoe]\nlisten = \"127.0.0.1:0\"\n", nil)
	c, err := net.Dial("tcp", r.SPOEAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := spopFrame(1, 0, spopStr("supported-versions", false), spopStr("2.0", true),
		spopStr("max-frame-size", false), []byte{3, 0xf0, 0x01}, // uint32 256
		spopStr("capabilities", false), spopStr("pipelining", true))
	c.Write(hello)
	if typ, _ := readSPOP(t, c); typ != 101 {
		t.Fatalf("frame type %d, want AGENT-HELLO", typ)
	}
	notify := func(id byte) []byte {
		return spopFrame(3, id, spopStr("check", false), []byte{1}, spopStr("tag", false), spopStr("a", true))
	}
	c.Write(append(notify(1), notify(2)...))
	for i, want := range []string{`allowed` + "\x02\x01", `allowed` + "\x02\x01"} {
		typ, p := readSPOP(t, c)
		if typ != 103 || !strings.Contains(p, want) || !strings.Contains(p, `"default";r=`) {
			t.Fatalf("ack %d: type %d payload %q", i, typ, p)
		}
	}
	if got := r.ask(t, "a", "a"); got != "OK NO" {
		t.Fatalf("the line protocol after two SPOE messages: %q, want OK NO", got)
	}
	c.Write(notify(3))
	if _, p := readSPOP(t, c); !strings.Contains(p, "allowed\x02\x00") || !strings.Contains(p, "retry_after") {
		t.Fatalf("after the line protocol spent the bucket: %q", p)
	}
	if st := r.SPOEStats(); st.Allowed != 2 || st.Refused != 1 || st.Active != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := r.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readSPOP(t, c); typ != 102 {
		t.Errorf("on stop: frame type %d, want AGENT-DISCONNECT", typ)
	}
}

// TestSPOENeedsRestart: a reload names spoe.listen and spoe.max_conns as
// needing a restart, and the agent goes on serving on its socket.
func TestSPOENeedsRestart(t *testing.T) {
	const withSPOE = base + "[spoe]\nlisten = \"127.0.0.1:0\"\n"
	r := start(t, withSPOE, nil)
	addr := r.SPOEAddr().String()
	writeConfig(t, filepath.Dir(r.path), r.sock, strings.Replace(withSPOE, `"127.0.0.1:0"`, `"127.0.0.1:1"`, 1)+"max_conns = 5\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := r.ev.wait(t, Reloaded, 0); !slices.Equal(ev.Keys, []string{"spoe.listen", "spoe.max_conns"}) {
		t.Fatalf("needs a restart: %v, want [spoe.listen spoe.max_conns]", ev.Keys)
	}
	if got := r.SPOEAddr().String(); got != addr {
		t.Fatalf("after the reload the agent is on %s, want %s", got, addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the agent stopped taking connections: %v", err)
	}
	c.Close()
}
