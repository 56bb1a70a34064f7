package protocol

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func TestNextLine(t *testing.T) {
	cases := []struct {
		in      string
		wantTag string
		wantN   int
	}{
		{"", "", 0},
		{"abc", "", 0},
		{"abc\r", "", 0},
		{"\n", "", 1},
		{"\r\n", "", 2},
		{"a\n", "a", 2},
		{"a\r\n", "a", 3},
		{"a\r\r\n", "a\r", 4},
		{"\ra\n", "\ra", 3},
		{"a\nb\n", "a", 2},
		{"\x00\xff\n", "\x00\xff", 3},
		{"Tag\nrest", "Tag", 4},
	}
	for i, tc := range cases {
		tag, n := nextLine([]byte(tc.in))
		if string(tag) != tc.wantTag || n != tc.wantN {
			t.Errorf("case %d: nextLine(%q) = %q, %d; want %q, %d", i, tc.in, tag, n, tc.wantTag, tc.wantN)
		}
	}
}

// TestAnswerLinesLimit checks that answerLines stops once out reaches the
// limit and resumes where it stopped.
func TestAnswerLinesLimit(t *testing.T) {
	in := []byte("aa\nb\n\ncc\nd\ntail")
	steps := []struct {
		consumed, lines int
		out             string
	}{
		{5, 2, "OK\nNO\n"}, // limit 4: stops after the reply that crossed it
		{4, 2, "OK\nOK\n"},
		{2, 1, "NO\n"},
		{0, 0, ""}, // only "tail" is left: not a complete line
	}
	pos := 0
	for i, st := range steps {
		out, consumed, lines := answerLines(nil, in[pos:], time.Time{}, &recordDecider{}, 4)
		if consumed != st.consumed || lines != st.lines || string(out) != st.out {
			t.Errorf("step %d: got %d, %d, %q; want %d, %d, %q", i, consumed, lines, out, st.consumed, st.lines, st.out)
		}
		pos += consumed
	}
	if rest := string(in[pos:]); rest != "tail" {
		t.Errorf("left %q, want %q", rest, "tail")
	}
}

func TestAnswerLinesAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	in := benchLines(64)
	out := make([]byte, 0, 64*replyLen)
	allocs := testing.AllocsPerRun(100, func() {
		out, _, _ = answerLines(out[:0], in, time.Now(), parityDecider{}, outFlush)
	})
	if allocs != 0 {
		t.Errorf("answerLines allocates %v times per batch, want 0", allocs)
	}
}

// FuzzLineReader checks answerLines, fed the way a connection feeds it
// (with a fuzzed output limit), against a plain split on '\n'.
func FuzzLineReader(f *testing.F) {
	for _, seed := range []string{
		"", "\n", "a\n", "a\r\n", "a\nb", "\r\r\n", "\r", "ab\n\ncd\r\nx",
		"\x00\n\xff\xfe\r\n", "\n\n\n\n", "tag\n" + string(bytes.Repeat([]byte{'x'}, 300)),
	} {
		f.Add([]byte(seed), uint16(0))
		f.Add([]byte(seed), uint16(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		lim := 1 + int(limit%256)
		d := &recordDecider{}
		var replies []byte
		pos := 0
		for {
			out, consumed, lines := answerLines(nil, data[pos:], time.Time{}, d, lim)
			if len(out) != lines*replyLen {
				t.Fatalf("%d bytes of replies for %d lines", len(out), lines)
			}
			if len(out) > lim+replyLen-1 {
				t.Fatalf("%d bytes of replies, over limit %d", len(out), lim)
			}
			if (consumed == 0) != (lines == 0) || consumed > len(data)-pos {
				t.Fatalf("consumed %d bytes of %d for %d lines", consumed, len(data)-pos, lines)
			}
			if consumed > 0 && data[pos+consumed-1] != '\n' {
				t.Fatalf("consumed up to %q, not a newline", data[pos+consumed-1])
			}
			replies = append(replies, out...)
			pos += consumed
			if lines == 0 {
				break
			}
		}

		// The model.
		parts := bytes.Split(data, []byte{'\n'})
		complete := parts[:len(parts)-1]
		if got, want := len(replies)/replyLen, bytes.Count(data, []byte{'\n'}); got != want {
			t.Fatalf("%d replies for %d terminated lines", got, want)
		}
		if want := len(data) - len(parts[len(parts)-1]); pos != want {
			t.Fatalf("consumed %d bytes, want %d", pos, want)
		}
		var wantTags [][]byte
		var wantReplies []byte
		for _, line := range complete {
			tag := line
			if len(tag) > 0 && tag[len(tag)-1] == '\r' {
				tag = tag[:len(tag)-1]
			}
			if len(tag) > 0 {
				wantTags = append(wantTags, tag)
			}
			wantReplies = appendReply(wantReplies, len(tag) == 0 || evenLen(tag))
		}
		if diff := diffReplies(replies, wantReplies); diff != "" {
			t.Fatal(diff)
		}
		if got := d.seen(); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantTags) {
			t.Fatalf("decider saw %q, want %q", got, wantTags)
		}
	})
}

// benchLines returns n request lines of typical tags (IPv4 addresses).
func benchLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "10.%d.%d.%d\n", i%7, i%251, i)
	}
	return b.Bytes()
}

// BenchmarkAnswerLines measures the per-query path: find the line, decide,
// append the reply. One op is one query.
func BenchmarkAnswerLines(b *testing.B) {
	const batch = 64
	in := benchLines(batch)
	out := make([]byte, 0, batch*replyLen)
	now := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(len(in) / batch))
	for i := 0; i < b.N; i += batch {
		out, _, _ = answerLines(out[:0], in[:], now, parityDecider{}, outFlush)
	}
}
