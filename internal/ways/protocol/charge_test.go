package protocol

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// recordCharger records copies of the charges it is given, as "n tag".
type recordCharger struct {
	mu      sync.Mutex
	charges []string
}

func (c *recordCharger) Charge(_ time.Time, tag []byte, n uint32) {
	c.mu.Lock()
	c.charges = append(c.charges, fmt.Sprintf("%d %s", n, tag))
	c.mu.Unlock()
}

func (c *recordCharger) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.charges...)
}

func TestParseCharge(t *testing.T) {
	for _, tc := range []struct {
		line string
		n    uint32
		tag  string
		ok   bool
	}{
		{"10 1.2.3.4", 10, "1.2.3.4", true},
		{"0 a", 0, "a", true},
		{"007 a", 7, "a", true},
		{"00000000000000000001 a", 1, "a", true},
		{"4294967295 a", 4294967295, "a", true},
		{"5 ", 5, "", true},
		{"5  two spaces", 5, " two spaces", true},
		{"5 a b c", 5, "a b c", true},
		{"5 \x00\xff\t", 5, "\x00\xff\t", true},
		{"", 0, "", false},
		{"5", 0, "", false},
		{" a", 0, "", false},
		{"  a", 0, "", false},
		{"a 5", 0, "", false},
		{"+5 a", 0, "", false},
		{"-1 a", 0, "", false},
		{"1.5 a", 0, "", false},
		{"5\ta", 0, "", false},
		{"0x10 a", 0, "", false},
		{"4294967296 a", 0, "", false},
		{"99999999999999999999999 a", 0, "", false},
	} {
		n, tag, ok := parseCharge([]byte(tc.line))
		if ok != tc.ok || ok && (n != tc.n || string(tag) != tc.tag) {
			t.Errorf("parseCharge(%q) = %d, %q, %v; want %d, %q, %v", tc.line, n, tag, ok, tc.n, tc.tag, tc.ok)
		}
	}
}

// TestAnswerCharges: one reply per line, in order, BAD for every
// malformed line, empty ones included, and a charge for every other line
// with a tag, '\r' stripped.
func TestAnswerCharges(t *testing.T) {
	in := "10 a\n\nx\n3 b\r\n5 \n-1 c\n4294967296 d\n1 \x00bin\xff\n2 c"
	ch := &recordCharger{}
	out, consumed, lines, bad := answerCharges(nil, []byte(in), time.Time{}, ch, outFlush)
	if got, want := string(out), "OK\nBAD\nBAD\nOK\nOK\nBAD\nBAD\nOK\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if consumed != len(in)-len("2 c") || lines != 8 || bad != 4 {
		t.Errorf("consumed %d bytes, %d lines, %d bad; want %d, 8, 4", consumed, lines, bad, len(in)-3)
	}
	if got, want := fmt.Sprintf("%q", ch.seen()), fmt.Sprintf("%q", []string{"10 a", "3 b", "1 \x00bin\xff"}); got != want {
		t.Errorf("charged %s, want %s", got, want)
	}
	// The limit on out stops before the next line.
	out, consumed, lines, _ = answerCharges(nil, []byte("x\nx\nx\n"), time.Time{}, ch, 5)
	if string(out) != "BAD\nBAD\n" || consumed != 4 || lines != 2 {
		t.Errorf("with a limit of 5 bytes: %q, %d bytes, %d lines", out, consumed, lines)
	}
}

// serveChargeFake serves chunks on a fakeConn as a charge connection.
func serveChargeFake(ch decide.Charger, maxLine int, chunks ...[]byte) (*fakeConn, *conn, *counters) {
	fc := &fakeConn{chunks: chunks}
	var st counters
	c := newConn(fc, nil, maxLine, time.Now, &st, slog.New(slog.DiscardHandler))
	c.charge = ch
	c.serve()
	return fc, c, &st
}

// modelCharges is what a charge connection replies to data followed by
// end of file, and the charges it makes.
func modelCharges(data []byte, maxLine int) (replies []byte, charges []string, bad int) {
	answer := func(line []byte) {
		n, tag, ok := parseCharge(trimCR(line))
		switch {
		case !ok:
			replies = append(replies, replyBad...)
			bad++
			return
		case len(tag) > 0:
			charges = append(charges, fmt.Sprintf("%d %s", n, tag))
		}
		replies = append(replies, replyCharged...)
	}
	for rest := data; ; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(rest) > 0 && len(rest) <= maxLine {
				answer(rest)
			}
			return replies, charges, bad
		}
		if i > maxLine {
			return replies, charges, bad
		}
		answer(rest[:i])
		rest = rest[i+1:]
	}
}

// TestChargeConnPieces delivers charge lines in random pieces, with a
// last line left without '\n' and over-long lines: the replies, the
// charges and the counts are those of modelCharges, and writes are
// batched as on the query socket.
func TestChargeConnPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var in bytes.Buffer
	for i := range 20000 {
		switch rng.IntN(20) {
		case 0:
			in.WriteString("\n")
		case 1:
			in.WriteString("x y\n")
		case 2:
			fmt.Fprintf(&in, "%d t%d\r\n", rng.Uint32(), i%17)
		default:
			fmt.Fprintf(&in, "%d t%d\n", rng.IntN(1000), i%17)
		}
	}
	in.WriteString("9 last")
	for _, maxChunk := range []int{1, 7, 4096, 100000} {
		data := in.Bytes()
		var chunks [][]byte
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(maxChunk))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		ch := &recordCharger{}
		fc, c, st := serveChargeFake(ch, MaxLine, chunks...)
		replies, charges, bad := modelCharges(data, MaxLine)
		if !bytes.Equal(fc.out.Bytes(), replies) {
			t.Fatalf("pieces of up to %d bytes: replies differ from the model (%d bytes, want %d)", maxChunk, fc.out.Len(), len(replies))
		}
		if got := ch.seen(); fmt.Sprint(got) != fmt.Sprint(charges) {
			t.Fatalf("pieces of up to %d bytes: %d charges, want %d", maxChunk, len(got), len(charges))
		}
		if q, b := c.queries.Load(), st.bad.Load(); q != 20001 || b != uint64(bad) {
			t.Fatalf("counted %d lines, %d bad; want 20001, %d", q, b, bad)
		}
		for i, e := range fc.events {
			if e.op == 'W' && i > 0 && fc.events[i-1].op == 'W' && fc.events[i-1].n < outFlush {
				t.Fatalf("event %d: two writes in a row, the first of %d bytes only", i, fc.events[i-1].n)
			}
		}
	}
	// An over-long line: the replies before it, then the end.
	fc, _, st := serveChargeFake(&recordCharger{}, 16, []byte("1 a\nbad\n1 "+strings.Repeat("z", 20)+"\n1 never\n"))
	if got := fc.out.String(); got != "OK\nBAD\n" || st.lineTooLong.Load() != 1 {
		t.Errorf("over-long line: replies %q, %d counted; want OK BAD and 1", got, st.lineTooLong.Load())
	}
}

// startChargeServer serves the charge form on one listener per network;
// it is closed when the test ends.
func startChargeServer(t *testing.T, ch decide.Charger, cfg Config, networks ...string) (*ChargeServer, []net.Listener) {
	t.Helper()
	s := NewChargeServer(ch, cfg)
	var ls []net.Listener
	served := make(chan error, len(networks))
	for _, n := range networks {
		l := listen(t, n)
		ls = append(ls, l)
		go func() { served <- s.Serve(l) }()
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range ls {
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	})
	return s, ls
}

// TestChargeServer pipelines charges on real sockets: one reply per line
// in order, a malformed line answered BAD with the stream still in step,
// and the counters and metrics.
func TestChargeServer(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			ch := &recordCharger{}
			s, ls := startChargeServer(t, ch, Config{}, network)
			c := dial(t, ls[0].Addr())
			if _, err := io.WriteString(c, "10 a\nten a\n\n3 b\r\n0 c\n1 d"); err != nil {
				t.Fatal(err)
			}
			closeWrite(t, c)
			if got, want := string(readAll(t, c)), "OK\nBAD\nBAD\nOK\nOK\nOK\n"; got != want {
				t.Fatalf("replies %q, want %q", got, want)
			}
			if got, want := fmt.Sprint(ch.seen()), "[10 a 3 b 0 c 1 d]"; got != want {
				t.Errorf("charged %s, want %s", got, want)
			}
			testkit.WaitFor(t, ioTimeout, "the connection to end", func() bool { return s.Stats().Active == 0 })
			if st := s.Stats(); st.Charged != 4 || st.Bad != 2 || st.Accepted != 1 {
				t.Errorf("stats %+v: want 4 charged, 2 bad, 1 accepted", st)
			}
			mt.Expect(t, mt.Gather(t, s.Collector()),
				mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=ok", Kind: mt.Counter, Value: 4},
				mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=bad", Kind: mt.Counter, Value: 2},
				mt.Sample{Name: "dthrottle_charge_connections_accepted_total", Kind: mt.Counter, Value: 1},
			)
		})
	}
}

// TestChargeServerMaxConns: a connection over the limit is closed
// without a reply, as on the query socket.
func TestChargeServerMaxConns(t *testing.T) {
	s, ls := startChargeServer(t, &recordCharger{}, Config{MaxConns: 1}, "unix")
	first := dial(t, ls[0].Addr())
	if got := query(t, first, "1 a"); got != "OK\n" {
		t.Fatalf("first: %q", got)
	}
	second := dial(t, ls[0].Addr())
	io.WriteString(second, "1 a\n")
	if b := readAll(t, second); len(b) != 0 {
		t.Fatalf("over max_conns: read %q, want nothing", b)
	}
	if st := s.Stats(); st.Rejected != 1 {
		t.Errorf("stats %+v: want 1 rejected", st)
	}
}

func TestChargeCollector(t *testing.T) {
	st := ChargeStats{Stats: serve.Stats{Active: 3, Accepted: 10, Rejected: 1}, Charged: 100, Bad: 4, LineTooLong: 2}
	c := newChargeCollector(func() ChargeStats { return st })
	fams := mt.Gather(t, c)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=ok", Kind: mt.Counter, Value: 100},
		mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=bad", Kind: mt.Counter, Value: 4},
		mt.Sample{Name: "dthrottle_charge_lines_too_long_total", Kind: mt.Counter, Value: 2},
		mt.Sample{Name: "dthrottle_charge_connections", Kind: mt.Gauge, Value: 3},
		mt.Sample{Name: "dthrottle_charge_connections_accepted_total", Kind: mt.Counter, Value: 10},
		mt.Sample{Name: "dthrottle_charge_connections_rejected_total", Kind: mt.Counter, Value: 1},
	)
	if n := len(fams); n != 5 {
		t.Errorf("%d families, want 5", n)
	}
	mt.Lint(t, c)
	// Beside the query socket's, every family is its own.
	mt.Gather(t, c, newCollector(func() Stats { return Stats{} }))
}

// TestChargeNetcat: nc sends charge lines, closes its sending side, and
// prints one reply per line.
func TestChargeNetcat(t *testing.T) {
	nc := needTool(t, "nc")
	ch := &recordCharger{}
	_, ls := startChargeServer(t, ch, Config{}, "unix")
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nc, "-N", "-U", ls[0].Addr().String())
	cmd.Stdin = strings.NewReader("120 api:key1\nlots api:key1\n5 api:key1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nc: %v", err)
	}
	if string(out) != "OK\nBAD\nOK\n" {
		t.Errorf("nc printed %q, want OK BAD OK", out)
	}
	if got := fmt.Sprint(ch.seen()); got != "[120 api:key1 5 api:key1]" {
		t.Errorf("charged %s", got)
	}
}
