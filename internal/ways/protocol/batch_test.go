package protocol

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// batchCountDecider is a countDecider that answers in batches. Being
// asked one query at a time, or about an empty tag, fails the test.
type batchCountDecider struct {
	count    *countDecider
	t        testing.TB
	batches  atomic.Int64
	maxBatch atomic.Int64
}

func newBatchCountDecider(t testing.TB) *batchCountDecider {
	return &batchCountDecider{count: newCountDecider(), t: t}
}

func (d *batchCountDecider) Allow(time.Time, []byte) bool {
	d.t.Error("Allow called on a decide.BatchAllower")
	return false
}

func (d *batchCountDecider) AllowBatch(now time.Time, tags [][]byte, ok []bool) {
	d.batches.Add(1)
	if n := int64(len(tags)); n > d.maxBatch.Load() {
		d.maxBatch.Store(n)
	}
	if len(ok) != len(tags) {
		d.t.Errorf("DecideBatch: %d tags, %d answers", len(tags), len(ok))
	}
	for i, tag := range tags {
		if len(tag) == 0 {
			d.t.Error("DecideBatch asked about an empty tag")
		}
		ok[i] = d.count.Allow(now, tag)
	}
}

// randomLines returns n request lines, some empty, some ending in "\r\n",
// over a few tags so that the count decider's answers depend on order,
// and a partial line at the end.
func randomLines(rng *rand.Rand, n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		switch rng.IntN(10) {
		case 0:
			b = append(b, '\n')
		case 1:
			b = append(b, "tag"+string(rune('a'+rng.IntN(5)))+"\r\n"...)
		default:
			b = append(b, strings.Repeat("x", 1+rng.IntN(4))+"\n"...)
		}
	}
	return append(b, "partial"...)
}

// TestBatcherMatchesAnswerLines checks that a connection answering through
// a decide.BatchAllower gives exactly the replies, bytes consumed and line counts
// that answerLines gives through Decide, whatever the limit on out.
func TestBatcherMatchesAnswerLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 200; round++ {
		in := randomLines(rng, rng.IntN(300))
		limit := []int{1, 4, 64, 100, 192, outFlush}[rng.IntN(6)]
		one, batch := newCountDecider(), newBatchCountDecider(t)
		b := newBatcher(batch)
		var wantOut, gotOut []byte
		pos, gpos := 0, 0
		for {
			var n, lines, gn, glines int
			wantOut, n, lines = answerLines(wantOut[:0], in[pos:], time.Time{}, one, limit)
			gotOut, gn, glines = b.answer(gotOut[:0], in[gpos:], time.Time{}, limit)
			if !bytes.Equal(gotOut, wantOut) || gn != n || glines != lines {
				t.Fatalf("round %d, limit %d, at byte %d: got %q, %d bytes, %d lines; want %q, %d, %d",
					round, limit, pos, gotOut, gn, glines, wantOut, n, lines)
			}
			if len(gotOut) > limit+replyLen-1 {
				t.Fatalf("round %d: %d bytes of replies, limit %d", round, len(gotOut), limit)
			}
			pos, gpos = pos+n, gpos+gn
			if n == 0 {
				break
			}
		}
		if got := string(in[pos:]); got != "partial" {
			t.Fatalf("round %d: left %q unanswered, want %q", round, got, "partial")
		}
	}
}

// TestBatchDeciderOverSocket pipelines a few thousand queries to a server
// whose decide.Allower answers in batches: replies in order, batches of at most
// batchMax, and Decide never used.
func TestBatchDeciderOverSocket(t *testing.T) {
	d := newBatchCountDecider(t)
	ts := startServer(t, d, Config{}, "unix")
	c := dial(t, ts.addr(0))
	var tags []string
	var req []byte
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 5000; i++ {
		tag := []string{"", "a", "bb", "ccc", "a\r"}[rng.IntN(5)]
		tags = append(tags, strings.TrimSuffix(tag, "\r"))
		req = append(append(req, tag...), '\n')
	}
	werr := writeAsync(c, req)
	got := make([]byte, len(tags)*replyLen)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if diff := diffReplies(got, countModel(tags)); diff != "" {
		t.Fatal(diff)
	}
	if d.batches.Load() == 0 || d.maxBatch.Load() > batchMax {
		t.Fatalf("%d batches, largest %d; want some, of at most %d", d.batches.Load(), d.maxBatch.Load(), batchMax)
	}
}

// batchParity is parityDecider answering in batches.
type batchParity struct{ parityDecider }

func (batchParity) AllowBatch(_ time.Time, tags [][]byte, ok []bool) {
	for i, tag := range tags {
		ok[i] = tag[0]&1 == 0
	}
}

func TestBatcherAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	in := benchLines(256)
	out := make([]byte, 0, 256*replyLen)
	b := newBatcher(batchParity{})
	allocs := testing.AllocsPerRun(100, func() {
		out, _, _ = b.answer(out[:0], in, time.Now(), outFlush)
	})
	if allocs != 0 {
		t.Errorf("answering in batches allocates %v times per read, want 0", allocs)
	}
}
