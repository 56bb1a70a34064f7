package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// badInputConfig serves Unix and TCP with burst 3 and a rate so low that
// nothing refills during a test: every tag answers OK OK OK NO.
const badInputConfig = `
[listen]
unix = "%%SOCK%%"
tcp = "127.0.0.1:0"
max_conns = %d
[limit]
rate = 0.001
burst = 3
[admin]
http = "127.0.0.1:0"
`

// queryAddr is one of a daemon's query listeners.
type queryAddr struct{ network, addr string }

// startBadInput starts a daemon on badInputConfig and returns it, its
// admin address and its query endpoints (Unix first, then TCP).
func startBadInput(t *testing.T, maxConns int) (*harness.Daemon, string, []queryAddr) {
	t.Helper()
	d := harness.StartDaemon(t, fmt.Sprintf(badInputConfig, maxConns))
	return d, d.AdminAddr(t), []queryAddr{{"unix", d.Sock}, {"tcp", d.TCP}}
}

// replies spells a reply stream: 'O' for OK, 'N' for NO.
func replies(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == 'O' {
			b.WriteString("OK\n")
		} else {
			b.WriteString("NO\n")
		}
	}
	return b.String()
}

// stepDiff describes where a reply stream differs from the one wanted.
func stepDiff(got, want string) string {
	if got == want {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	i -= i % 3
	return fmt.Sprintf("reply %d: got %q, want %q (%d vs %d bytes)",
		i/3, got[i:min(i+9, len(got))], want[i:min(i+9, len(want))], len(got), len(want))
}

// dialE connects to e, retrying while a full listen backlog refuses it.
func dialE(t testing.TB, e queryAddr) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout(e.network, e.addr, 5*time.Second)
		if err == nil {
			return c
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("dial %s %s: %v", e.network, e.addr, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// exchangeAll sends in on a fresh connection, shuts down its sending side and
// returns all the daemon wrote back, and the error that ended the stream
// (nil for end of file). Write errors are ignored: the daemon may close
// first.
func exchangeAll(t *testing.T, e queryAddr, in []byte) (string, error) {
	t.Helper()
	c := dialE(t, e)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		if _, err := c.Write(in); err == nil {
			c.(interface{ CloseWrite() error }).CloseWrite()
		}
	}()
	out, err := io.ReadAll(c)
	<-wrote
	return string(out), err
}

// probes makes every probe's tags fresh.
var probes atomic.Int64

// probeFresh checks that a fresh client on every queryAddr is answered, in step:
// two fresh tags interleaved with an empty one give a known pattern.
func probeFresh(t *testing.T, eps []queryAddr) {
	t.Helper()
	for _, e := range eps {
		n := probes.Add(1)
		a, b := fmt.Sprintf("probe%d-a", n), fmt.Sprintf("probe%d-b", n)
		in := strings.Join([]string{a, b, a, a, a, b, "", b, b}, "\n") + "\n"
		got, err := exchangeAll(t, e, []byte(in))
		if d := stepDiff(got, replies("OOOONOOON")); d != "" || err != nil {
			t.Fatalf("probe on %s after the case: %s (err %v)", e.network, d, err)
		}
	}
}

// tagOf returns a tag of n bytes starting with id (padded with 'x').
func tagOf(id string, n int) string {
	if n <= len(id) {
		return id[:n]
	}
	return id + strings.Repeat("x", n-len(id))
}

// reqLines joins tags into requests.
func reqLines(tags ...string) []byte {
	var b bytes.Buffer
	for _, t := range tags {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestBadInputLines sends lines around the tag digest boundary
// (max_tag_bytes = 256) and the 64 KiB hard cap, binary bytes, NULs, bare
// carriage returns and unterminated lines, over Unix and TCP, and checks
// the exact reply stream and whether the connection stays open.
func TestBadInputLines(t *testing.T) {
	d, admin, eps := startBadInput(t, 100)
	allBytes := make([]byte, 0, 255)
	for b := 0; b < 256; b++ {
		if b != '\n' {
			allBytes = append(allBytes, byte(b))
		}
	}
	for _, e := range eps {
		// id makes each case's tags distinct per network.
		id := func(c string) string { return e.network + "-" + c + "-" }
		flip := func(s string) string { return s[:len(s)-1] + "y" }
		t256, t257 := tagOf(id("257"), 256), tagOf(id("257"), 257)
		all, nul := id("bin")+string(allBytes), "\x00"+e.network
		cases := []struct {
			name    string
			in      []byte
			want    string
			tooLong bool // the daemon closes the connection for the line
			reset   bool // input left unread at the close: may end in a reset
		}{
			// Empty tags are served and not accounted.
			{"0 bytes", reqLines("", "", "", ""), replies("OOOO"), false, false},
			{"1 byte", reqLines(e.network[:1], e.network[:1], e.network[:1], e.network[:1]), replies("OOON"), false, false},
			{"255 bytes", reqLines(tagOf(id("255"), 255), tagOf(id("255"), 255), tagOf(id("255"), 255),
				tagOf(id("255"), 255), flip(tagOf(id("255"), 255))), replies("OOONO"), false, false},
			{"256 bytes", reqLines(tagOf(id("256"), 256), tagOf(id("256"), 256), tagOf(id("256"), 256),
				tagOf(id("256"), 256), flip(tagOf(id("256"), 256))), replies("OOONO"), false, false},
			// Keyed by digest: the tag differing in its last byte and its
			// own 256-byte prefix are other tags.
			{"257 bytes", reqLines(t257, t257, t257, t257, flip(t257), t256), replies("OOONOO"), false, false},
			{"64 KiB - 1", reqLines(tagOf(id("64k-1"), 65535), tagOf(id("64k-1"), 65535), tagOf(id("64k-1"), 65535),
				tagOf(id("64k-1"), 65535), flip(tagOf(id("64k-1"), 65535))), replies("OOONO"), false, false},
			{"64 KiB", reqLines(tagOf(id("64k"), 65536), tagOf(id("64k"), 65536), tagOf(id("64k"), 65536),
				tagOf(id("64k"), 65536), flip(tagOf(id("64k"), 65536))), replies("OOONO"), false, false},
			// 65537 bytes before the '\n': the earlier lines are answered,
			// then the connection is closed.
			{"64 KiB + 1", append(reqLines(id("pre")), tagOf(id("64k+1"), 65537)...), replies("O"), true, false},
			// Requests after the long line are never read: closing with
			// them unread, the kernel resets the connection. The replies
			// written before still arrive first (on loopback).
			{"64 KiB + 1, more after", append(reqLines(id("pre-more")), reqLines(tagOf(id("64k+more"), 65537),
				id("pre-more"))...), replies("O"), true, true},
			// The cap counts the '\r' too: it is part of the line.
			{"64 KiB + CR", append(reqLines(id("pre-cr")), tagOf(id("64k+cr"), 65536)+"\r"...), replies("O"), true, false},
			{"binary and NULs", reqLines(all, nul, nul+"\x00", all, nul, all, nul, nul, all,
				"\xff\xfe"+e.network, "a\x00"+e.network, "a\x00"+e.network+"\x00"), replies("OOOOOOONNOOO"), false, false},
			// One trailing '\r' is stripped; "\r" alone is an empty tag.
			{"CR alone", reqLines("\r", "\r", "\r", "\r", id("cr")+"\r", id("cr"), id("cr")+"\r", id("cr")),
				replies("OOOOOOON"), false, false},
			// Only one is: "x\r\r" is the tag "x\r".
			{"CR CR", reqLines(id("crcr")+"\r\r", id("crcr")+"\r\r", id("crcr")+"\r\r", id("crcr")+"\r\r",
				id("crcr"), id("crcr")+"\r"), replies("OOONOO"), false, false},
			{"CR inside", reqLines(id("a\rb"), id("a\rb"), id("ab"), id("a\rb"), id("a\rb")), replies("OOOON"), false, false},
			// End of input ends a last line with no '\n', with or without
			// its '\r'; its hit is accounted like any other.
			{"no newline then EOF", []byte(id("eof") + "\n" + id("eof")), replies("OO"), false, false},
			{"more of it", reqLines(id("eof"), id("eof")), replies("ON"), false, false},
			{"CR then EOF", []byte(id("eofcr") + "\r\n" + id("eofcr") + "\r"), replies("OO"), false, false},
			{"more of that", reqLines(id("eofcr"), id("eofcr")), replies("ON"), false, false},
			{"nothing then EOF", nil, "", false, false},
		}
		for _, c := range cases {
			t.Run(e.network+"/"+c.name, func(t *testing.T) {
				before := harness.Metric(t, harness.Scrape(t, admin), "dthrottle_lines_too_long_total")
				got, err := exchangeAll(t, e, c.in)
				if diff := stepDiff(got, c.want); diff != "" {
					t.Fatal(diff)
				}
				// Closed for a long line, the daemon has read all we sent:
				// it closes cleanly, no reset.
				if err != nil && !(c.reset && errors.Is(err, syscall.ECONNRESET)) {
					t.Fatalf("stream ended with %v, want end of file", err)
				}
				after := harness.Metric(t, harness.Scrape(t, admin), "dthrottle_lines_too_long_total")
				want := before
				if c.tooLong {
					want++
				}
				if after != want {
					t.Fatalf("lines_too_long_total went from %v to %v, want %v", before, after, want)
				}
				probeFresh(t, eps)
			})
		}
	}
	if !strings.Contains(d.Stderr.String(), "request line too long") {
		t.Fatalf("no log of the long line:\n%s", d.Stderr)
	}
	if strings.Contains(d.Stderr.String(), "64k+1") {
		t.Fatal("the long line's tag is in the log")
	}
}

// TestBadInputEmptyLines sends 100,000 empty lines in one stream: 100,000
// OKs, counted as requests, and nothing tracked or accounted.
func TestBadInputEmptyLines(t *testing.T) {
	_, admin, eps := startBadInput(t, 100)
	const n = 100000
	before := harness.Scrape(t, admin)
	got, err := exchangeAll(t, eps[0], bytes.Repeat([]byte("\n"), n))
	if diff := stepDiff(got, strings.Repeat("OK\n", n)); diff != "" || err != nil {
		t.Fatalf("%s (err %v)", diff, err)
	}
	after := harness.Scrape(t, admin)
	for _, c := range []struct {
		name, label string
		delta       float64
	}{
		{"dthrottle_requests_total", "", n},
		{"dthrottle_queries_total", "result=ok", 0},
		{"dthrottle_queries_total", "result=no", 0},
		{"dthrottle_tags", "", 0},
	} {
		var l []string
		if c.label != "" {
			l = []string{c.label}
		}
		if d := harness.Metric(t, after, c.name, l...) - harness.Metric(t, before, c.name, l...); d != c.delta {
			t.Errorf("%s%v grew by %v, want %v", c.name, l, d, c.delta)
		}
	}
	probeFresh(t, eps)
}

// TestBadInputHalfClosed pipelines 10,000 requests, shuts down the sending
// side and reads every reply, in order, then end of file.
func TestBadInputHalfClosed(t *testing.T) {
	_, _, eps := startBadInput(t, 100)
	for _, e := range eps {
		t.Run(e.network, func(t *testing.T) {
			var in, want bytes.Buffer
			for round := 0; round < 4; round++ { // rounds 0-2 served, 3 refused
				for k := 0; k < 2500; k++ {
					fmt.Fprintf(&in, "half-%s-%d\n", e.network, k)
					want.WriteString(replies(string("OOON"[round])))
				}
			}
			got, err := exchangeAll(t, e, in.Bytes())
			if diff := stepDiff(got, want.String()); diff != "" || err != nil {
				t.Fatalf("%s (err %v)", diff, err)
			}
			probeFresh(t, eps)
		})
	}
}

// TestBadInputReset drops connections mid-pipeline: TCP with SO_LINGER 0
// (a reset), Unix with replies unread; then churns through 2,000 more that
// close or reset at once, some mid-line. The daemon frees every one of
// them (its open files return to what they were) and answers everyone
// else in step.
func TestBadInputReset(t *testing.T) {
	d, admin, eps := startBadInput(t, 100)
	pid := d.Cmd.Process.Pid
	awaitMetric(t, admin, "dthrottle_connections", 0)
	files := openFiles(t, pid)
	for _, e := range eps {
		t.Run(e.network, func(t *testing.T) {
			for i := 0; i < 20; i++ {
				c := dialE(t, e)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				in := bytes.Repeat([]byte(fmt.Sprintf("reset-%s-%d\n", e.network, i)), 100000)
				wrote := make(chan struct{})
				go func() { defer close(wrote); c.Write(in) }()
				// The daemon is answering: cut the stream off mid-pipeline.
				head := make([]byte, 12)
				if _, err := io.ReadFull(c, head); err != nil || string(head) != replies("OOON") {
					t.Fatalf("first replies %q, %v", head, err)
				}
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				c.Close()
				<-wrote
			}
			for i := 0; i < 1000; i++ {
				c := dialE(t, e)
				if i%2 == 1 {
					c.Write([]byte("half a li"))
				}
				if tc, ok := c.(*net.TCPConn); ok && i%4 < 2 {
					tc.SetLinger(0)
				}
				c.Close()
			}
			awaitMetric(t, admin, "dthrottle_connections", 0)
			probeFresh(t, eps)
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := openFiles(t, pid); n > files; n = openFiles(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon has %d files open, %d before the resets: a leak", n, files)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openFiles counts the file descriptors process pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// askOn sends one request on c and returns its reply.
func askOn(t *testing.T, c net.Conn, tag string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(tag + "\n")); err != nil {
		t.Fatalf("asking %q: %v", tag, err)
	}
	b := make([]byte, 3)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reply to %q: %v", tag, err)
	}
	return string(b)
}

// TestBadInputWriterNotReading is a client that sends requests (up to
// 1 GB) and never reads a reply. Once its replies fill the socket buffers
// the daemon blocks writing them and stops reading its requests, so the
// client's writes block and the daemon's memory stays flat; other clients
// are answered meanwhile. When the client reads at last, every reply is
// there, in step.
func TestBadInputWriterNotReading(t *testing.T) {
	d, admin, eps := startBadInput(t, 100)
	pid := d.Cmd.Process.Pid
	for _, e := range eps {
		t.Run(e.network, func(t *testing.T) {
			rssBefore := rssKiB(t, pid)
			c := dialE(t, e)
			defer c.Close()
			// One-byte tags: 2 bytes of request make 3 bytes of reply.
			chunk := bytes.Repeat([]byte(e.network[:1]+"\n"), 32<<10)
			var sent int64
			off, deadline := 0, time.Now().Add(60*time.Second)
			for sent < 1<<30 {
				if time.Now().After(deadline) {
					t.Fatalf("writes still not blocked after 60s, %d bytes sent", sent)
				}
				// A second without a byte taken: the daemon stopped reading.
				c.SetWriteDeadline(time.Now().Add(time.Second))
				n, err := c.Write(chunk[off:])
				sent, off = sent+int64(n), (off+n)%len(chunk)
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("write after %d bytes: %v", sent, err)
					}
					if n == 0 {
						break
					}
				}
			}
			if sent >= 1<<30 {
				t.Fatal("1 GB sent and never blocked: the daemon buffers without bound")
			}
			rssStuck := rssKiB(t, pid)
			requests := harness.Metric(t, harness.Scrape(t, admin), "dthrottle_requests_total")

			// Another client is answered in step, each reply within 5s,
			// while the stuck connection is not read at all.
			other := dialE(t, eps[0])
			defer other.Close()
			for i := 0; i < 100; i++ {
				if got := askOn(t, other, fmt.Sprintf("other-%s-%d", e.network, i/4)); got != replies(string("OOON"[i%4])) {
					t.Fatalf("other client, request %d: %q", i, got)
				}
			}
			probeFresh(t, eps)
			if got := harness.Metric(t, harness.Scrape(t, admin), "dthrottle_requests_total") - requests; got != 100+9*2 {
				t.Fatalf("%v requests answered meanwhile, want 118: the stuck connection was read", got)
			}

			// Reading at last: one reply per line sent, the first three
			// OK (burst 3); end of input ends a last line cut in half.
			c.SetDeadline(time.Now().Add(60 * time.Second))
			c.(interface{ CloseWrite() error }).CloseWrite()
			got, err := io.ReadAll(c)
			n := (sent + 1) / 2
			if err != nil || int64(len(got)) != 3*n || string(got[:9]) != replies("OOO") ||
				int64(bytes.Count(got[9:], []byte("NO\n"))) != n-3 {
				t.Fatalf("after reading again: %d bytes (want %d for %d lines), %q..., err %v",
					len(got), 3*n, n, got[:min(len(got), 12)], err)
			}
			other.Close()
			awaitMetric(t, admin, "dthrottle_connections", 0)
			rssAfter := rssKiB(t, pid)
			t.Logf("%s: %d KiB sent before the writes blocked; daemon RSS %d KiB before, %d KiB stuck (%+d), %d KiB after",
				e.network, sent>>10, rssBefore, rssStuck, rssStuck-rssBefore, rssAfter)
			if rssStuck-rssBefore > 64<<10 {
				t.Fatalf("daemon RSS grew by %d KiB while the client was stuck, over 64 MiB", rssStuck-rssBefore)
			}
			probeFresh(t, eps)
		})
	}
}
