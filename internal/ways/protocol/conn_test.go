package protocol

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// fakeConn is a net.Conn reading from chunks, each returned by one or more
// Reads, then end of file. It records its Reads and Writes in order.
type fakeConn struct {
	chunks [][]byte
	events []event
	out    bytes.Buffer
}

// event is one Read ('R') or Write ('W') of n bytes.
type event struct {
	op byte
	n  int
}

func (c *fakeConn) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		c.events = append(c.events, event{'R', 0})
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	c.events = append(c.events, event{'R', n})
	return n, nil
}

func (c *fakeConn) Write(p []byte) (int, error) {
	c.events = append(c.events, event{'W', len(p)})
	return c.out.Write(p)
}

func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return fakeAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return fakeAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

var _ net.Conn = (*fakeConn)(nil)

type fakeAddr struct{}

func (fakeAddr) Network() string { return "fake" }
func (fakeAddr) String() string  { return "fake" }

// serveFake serves chunks on a fakeConn with lines of at most maxLine bytes.
func serveFake(d decide.Allower, maxLine int, chunks ...[]byte) (*fakeConn, *conn, *counters) {
	fc := &fakeConn{chunks: chunks}
	var st counters
	c := newConn(fc, d, maxLine, time.Now, &st, slog.New(slog.DiscardHandler))
	c.serve()
	return fc, c, &st
}

// checkBatching checks the write rules: no Write over outFlush+replyLen-1
// bytes, and no Write following another unless that one was full (at least
// outFlush bytes): replies are written once per read otherwise.
func checkBatching(t *testing.T, events []event) {
	t.Helper()
	for i, e := range events {
		if e.op != 'W' {
			continue
		}
		if e.n > outFlush+replyLen-1 {
			t.Fatalf("event %d: write of %d bytes, over %d", i, e.n, outFlush+replyLen-1)
		}
		if i > 0 && events[i-1].op == 'W' && events[i-1].n < outFlush {
			t.Fatalf("event %d: two writes in a row, the first of %d bytes only", i, events[i-1].n)
		}
	}
}

func TestConnBatchesWrites(t *testing.T) {
	tags := make([]string, 20000)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d", i%13)
	}
	fc, c, _ := serveFake(newCountDecider(), MaxLine, lines(tags...))
	if diff := diffReplies(fc.out.Bytes(), countModel(tags)); diff != "" {
		t.Fatal(diff)
	}
	checkBatching(t, fc.events)
	var reads, writes int
	for _, e := range fc.events {
		if e.op == 'R' {
			reads++
		} else {
			writes++
		}
	}
	if writes > reads {
		t.Errorf("%d writes for %d reads", writes, reads)
	}
	if c.queries.Load() != uint64(len(tags)) {
		t.Errorf("counted %d queries, want %d", c.queries.Load(), len(tags))
	}
}

// TestConnLongLineThenShortOnes grows the read buffer with a long line, then
// fills it with empty lines, whose replies are three times their size: the
// replies are written in pieces of about outFlush bytes, and the buffer
// shrinks back once drained.
func TestConnLongLineThenShortOnes(t *testing.T) {
	long := strings.Repeat("L", 40000)
	empties := bytes.Repeat([]byte{'\n'}, 20000)
	in := append([]byte(long+"\n"), empties...)
	in = append(in, "aa\n"...)
	d := &recordDecider{}
	fc, c, _ := serveFake(d, MaxLine, in)

	want := append([]byte(replyOK), bytes.Repeat([]byte(replyOK), len(empties)+1)...)
	if diff := diffReplies(fc.out.Bytes(), want); diff != "" {
		t.Fatal(diff)
	}
	checkBatching(t, fc.events)
	full := 0
	for _, e := range fc.events {
		if e.op == 'W' && e.n >= outFlush {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no write of %d bytes or more: the output limit was not exercised", outFlush)
	}
	if len(c.buf) != readBufSize {
		t.Errorf("read buffer of %d bytes after draining, want %d", len(c.buf), readBufSize)
	}
	if seen := d.seen(); len(seen) != 2 || string(seen[0]) != long || string(seen[1]) != "aa" {
		t.Errorf("decider saw %d tags, want the long one and \"aa\"", len(seen))
	}
}

// TestConnLineTooLong feeds an over-long line in small pieces.
func TestConnLineTooLong(t *testing.T) {
	var chunks [][]byte
	chunks = append(chunks, []byte("aa\nb\nc"))
	for range (MaxLine / 1000) + 1 {
		chunks = append(chunks, bytes.Repeat([]byte{'c'}, 1000))
	}
	chunks = append(chunks, []byte("\nnever\n"))
	fc, _, st := serveFake(&recordDecider{}, MaxLine, chunks...)
	if got, want := fc.out.String(), "OK\nNO\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if st.lineTooLong.Load() != 1 {
		t.Errorf("counted %d over-long lines, want 1", st.lineTooLong.Load())
	}
	if len(fc.chunks) == 0 {
		t.Errorf("read to the end, want a stop at the over-long line")
	}
}

// modelConn is what a connection with lines of at most maxLine bytes
// replies to data followed by end of file, given recordDecider, and the
// tags it decides.
func modelConn(data []byte, maxLine int) (replies []byte, tags [][]byte) {
	answer := func(line []byte) {
		tag := trimCR(line)
		if len(tag) > 0 {
			tags = append(tags, tag)
		}
		replies = appendReply(replies, len(tag) == 0 || evenLen(tag))
	}
	for rest := data; ; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(rest) > 0 && len(rest) <= maxLine {
				answer(rest) // end of input terminates the last line
			}
			return replies, tags
		}
		if i > maxLine {
			return replies, tags // over-long line: the connection closes
		}
		answer(rest[:i])
		rest = rest[i+1:]
	}
}

// FuzzConn runs the whole connection loop over a fakeConn that delivers the
// input in fuzzed pieces, with a fuzzed line cap, against modelConn.
func FuzzConn(f *testing.F) {
	for _, seed := range []string{
		"", "a\n", "aa\nb", "aa\r\nb\r", "\n\n\r\n", "x\x00y\n\xff",
		"short\n" + strings.Repeat("y", 100) + "\nafter\n",
		strings.Repeat("z", 5000) + "\n" + strings.Repeat("\n", 3000) + "end",
	} {
		f.Add([]byte(seed), uint64(1), uint16(8))
		f.Add([]byte(seed), uint64(2), uint16(6000))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, maxLine uint16) {
		ml := 1 + int(maxLine%8192)
		rng := rand.New(rand.NewPCG(seed, 0))
		maxChunk := []int{1, 3, 64, 5000}[rng.IntN(4)]
		var chunks [][]byte
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(maxChunk))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		d := &recordDecider{}
		fc, c, _ := serveFake(d, ml, chunks...)

		wantReplies, wantTags := modelConn(data, ml)
		if diff := diffReplies(fc.out.Bytes(), wantReplies); diff != "" {
			t.Fatal(diff)
		}
		if got := d.seen(); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantTags) {
			t.Fatalf("decider saw %q, want %q", got, wantTags)
		}
		if q := c.queries.Load(); q != uint64(len(wantReplies)/replyLen) {
			t.Fatalf("counted %d queries, want %d", q, len(wantReplies)/replyLen)
		}
		checkBatching(t, fc.events)
		if len(c.buf) > ml+1 {
			t.Fatalf("read buffer of %d bytes, over %d", len(c.buf), ml+1)
		}
	})
}
