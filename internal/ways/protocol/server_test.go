package protocol

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/dthrottle/dthrottle/internal/logtest"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

var networks = []string{"unix", "tcp"}

// TestPipelined sends 100,000 requests in one write and checks that exactly
// 100,000 replies come back, in order, each the decider's answer.
func TestPipelined(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			d := newCountDecider()
			ts := startServer(t, d, Config{}, network)

			const n = 100_000
			rng := rand.New(rand.NewPCG(1, 2))
			var req bytes.Buffer
			tags := make([]string, n)
			for i := range tags {
				switch k := rng.IntN(100); {
				case k == 0:
					tags[i] = "" // empty line
				case k == 1:
					tags[i] = fmt.Sprintf("cr%d", rng.IntN(50))
					req.WriteString(tags[i] + "\r\n")
					continue
				default:
					tags[i] = fmt.Sprintf("tag-%d", rng.IntN(1000))
				}
				req.WriteString(tags[i] + "\n")
			}
			want := countModel(tags)

			c := dial(t, ts.addr(0))
			wrote := make(chan error, 1)
			go func() {
				_, err := c.Write(req.Bytes())
				if err == nil {
					err = c.(interface{ CloseWrite() error }).CloseWrite()
				}
				wrote <- err
			}()
			got := readAll(t, c)
			if err := <-wrote; err != nil {
				t.Fatalf("writing requests: %v", err)
			}
			if diff := diffReplies(got, want); diff != "" {
				t.Fatal(diff)
			}
			if q := ts.Stats().Queries; q != n {
				t.Errorf("Stats().Queries = %d, want %d", q, n)
			}
		})
	}
}

// TestTags checks '\r' stripping, empty tags, and binary tags.
func TestTags(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			d := &recordDecider{}
			ts := startServer(t, d, Config{}, network)
			c := dial(t, ts.addr(0))

			req := "ab\r\n" + // CR stripped: "ab", even: OK
				"abc\r\n" + // "abc", odd: NO
				"\n" + // empty: OK, not decided
				"\r\n" + // empty after stripping: OK, not decided
				"x\r\r\n" + // one CR stripped: "x\r", even: OK
				"\x00b\x00\n" + // NULs verbatim: odd: NO
				"\xff\xfe\n" + // binary: OK
				"AB\n" // case kept: OK
			wantTags := []string{"ab", "abc", "x\r", "\x00b\x00", "\xff\xfe", "AB"}
			want := "OK\nNO\nOK\nOK\nOK\nNO\nOK\nOK\n"

			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			closeWrite(t, c)
			if got := string(readAll(t, c)); got != want {
				t.Errorf("replies %q, want %q", got, want)
			}
			var got []string
			for _, tag := range d.seen() {
				got = append(got, string(tag))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantTags) {
				t.Errorf("decider saw %q, want %q", got, wantTags)
			}
		})
	}
}

// TestLineTooLong checks that a line over MaxLine closes only its own
// connection, after the replies to its earlier lines, and that a line of
// exactly MaxLine bytes is answered.
func TestLineTooLong(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			logs := &logtest.Recorder{}
			d := &recordDecider{}
			ts := startServer(t, d, Config{Logger: slog.New(logs)}, network)

			other := dial(t, ts.addr(0))
			if got := query(t, other, "aa"); got != replyOK {
				t.Fatalf("other connection: %q, want OK", got)
			}

			long := dial(t, ts.addr(0))
			req := append(lines("aa", "b"), bytes.Repeat([]byte("y"), MaxLine+1)...)
			wrote := writeAsync(long, req)
			if got, want := string(readAll(t, long)), "OK\nNO\n"; got != want {
				t.Errorf("over-long connection got %q, want %q then end of file", got, want)
			}
			if err := <-wrote; err != nil {
				t.Errorf("writing the over-long line: %v", err)
			}
			if got := ts.Stats().LineTooLong; got != 1 {
				t.Errorf("Stats().LineTooLong = %d, want 1", got)
			}
			recs := logs.Find(slog.LevelWarn, "protocol: request line too long, closing connection")
			if len(recs) != 1 {
				t.Fatalf("%d over-long line warnings, want 1", len(recs))
			}
			if a := attrs(recs[0]); strings.Contains(a, "yyy") || !strings.Contains(a, "bytes=") {
				t.Errorf("warning attributes %q: want a size and no tag", a)
			}

			// The other connection is unaffected, and takes a line of
			// exactly MaxLine bytes (CR included).
			if got := query(t, other, "cc"); got != replyOK {
				t.Fatalf("other connection after: %q, want OK", got)
			}
			maxTag := strings.Repeat("z", MaxLine-1) + "\r"
			if got := query(t, other, maxTag); got != replyNO { // MaxLine-1 bytes: odd
				t.Errorf("line of MaxLine bytes: %q, want NO", got)
			}
			if got := query(t, other, strings.Repeat("z", MaxLine)); got != replyOK {
				t.Errorf("line of MaxLine bytes: %q, want OK", got)
			}
			if got := query(t, other, "dd"); got != replyOK {
				t.Errorf("after MaxLine lines: %q, want OK", got)
			}
			seen := d.seen()
			if n := len(seen[len(seen)-2]); n != MaxLine {
				t.Errorf("decider got a %d-byte tag, want %d", n, MaxLine)
			}
		})
	}
}

// TestEndOfInput checks that a client that half-closes gets every reply,
// the last unterminated line included, then end of file.
func TestEndOfInput(t *testing.T) {
	cases := []struct {
		name, req, want string
	}{
		{"terminated", "aa\nb\n", "OK\nNO\n"},
		{"unterminated", "aa\nb", "OK\nNO\n"},
		{"unterminated CR", "aa\nb\r", "OK\nNO\n"},
		{"lone CR", "aa\n\r", "OK\nOK\n"},
		{"empty", "", ""},
		{"only newline", "\n", "OK\n"},
	}
	for _, network := range networks {
		d := &recordDecider{}
		ts := startServer(t, d, Config{}, network)
		for _, tc := range cases {
			t.Run(network+"/"+tc.name, func(t *testing.T) {
				c := dial(t, ts.addr(0))
				if _, err := io.WriteString(c, tc.req); err != nil {
					t.Fatal(err)
				}
				closeWrite(t, c)
				if got := string(readAll(t, c)); got != tc.want {
					t.Errorf("replies %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestManyConnections runs 300 pipelining clients at once.
func TestManyConnections(t *testing.T) {
	const conns, perConn = 300, 200
	d := newCountDecider()
	ts := startServer(t, d, Config{}, "unix", "tcp")

	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		// Dial here so that all connections are open at once.
		c := dial(t, ts.addr(i%2))
		wg.Go(func() {
			tags := make([]string, perConn)
			for j := range tags {
				tags[j] = fmt.Sprintf("c%d-t%d", i, j%7) // tags private to this connection
			}
			want := countModel(tags)
			req := lines(tags...)
			for len(req) > 0 { // several writes, each pipelining many lines
				n := min(len(req), 301)
				if _, err := c.Write(req[:n]); err != nil {
					errs <- fmt.Errorf("conn %d: write: %v", i, err)
					return
				}
				req = req[n:]
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- fmt.Errorf("conn %d: read: %v", i, err)
				return
			}
			if diff := diffReplies(got, want); diff != "" {
				errs <- fmt.Errorf("conn %d: %s", i, diff)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := ts.Stats(); s.Active != conns || s.Accepted != conns || s.Queries != conns*perConn {
		t.Errorf("Stats() = %+v, want %d active and accepted, %d queries", s, conns, conns*perConn)
	}
}

// TestMaxConns checks that a connection over the limit gets end of file at
// once, is counted, and that a freed slot is reused.
func TestMaxConns(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			logs := &logtest.Recorder{}
			ts := startServer(t, &recordDecider{}, Config{MaxConns: 2, Logger: slog.New(logs)}, network)

			a, b := dial(t, ts.addr(0)), dial(t, ts.addr(0))
			// A reply proves the server took each into service.
			query(t, a, "aa")
			query(t, b, "bb")

			over := dial(t, ts.addr(0))
			if got := readAll(t, over); len(got) != 0 {
				t.Errorf("connection over the limit read %q, want end of file", got)
			}
			if s := ts.Stats(); s.Rejected != 1 || s.Accepted != 2 || s.Active != 2 {
				t.Errorf("Stats() = %+v, want 1 rejected, 2 accepted, 2 active", s)
			}
			if n := len(logs.Find(slog.LevelWarn, "protocol: connection limit reached, closing new connections")); n != 1 {
				t.Errorf("%d connection limit warnings, want 1", n)
			}

			a.Close()
			testkit.WaitFor(t, ioTimeout, "a slot to be freed", func() bool { return ts.Stats().Active == 1 })
			c := dial(t, ts.addr(0))
			if got := query(t, c, "cc"); got != replyOK {
				t.Errorf("new connection after a slot freed: %q, want OK", got)
			}
			if got := query(t, b, "bb"); got != replyOK {
				t.Errorf("b still served: %q, want OK", got)
			}
		})
	}
}
