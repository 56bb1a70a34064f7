package protocol

import (
	"bytes"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// Replies, each exactly one line.
const (
	replyOK = "OK\n"
	replyNO = "NO\n"
)

// replyLen is the length of every reply.
const replyLen = len(replyOK)

// nextLine finds the first complete line in b. It returns the line's tag, the
// bytes before the '\n' less one trailing '\r', and n, the number of bytes
// the line takes including its '\n'. When b holds no '\n', n is 0 and tag is
// nil. The tag aliases b.
func nextLine(b []byte) (tag []byte, n int) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, 0
	}
	return trimCR(b[:i]), i + 1
}

// trimCR removes one trailing '\r' from line.
func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}

// answer decides one tag: an empty tag is allowed without asking d.
func answer(d decide.Allower, now time.Time, tag []byte) bool {
	if len(tag) == 0 {
		return true
	}
	return d.Allow(now, tag)
}

// appendReply appends the reply for one decision to out.
func appendReply(out []byte, ok bool) []byte {
	if ok {
		return append(out, replyOK...)
	}
	return append(out, replyNO...)
}

// answerLines answers the complete lines at the start of in, in order,
// appending one reply per line to out. It stops when in holds no further
// '\n' or once out has reached limit bytes, whichever comes first, so out
// never grows past limit+replyLen-1 when it starts below limit. It returns
// the extended out, the number of bytes of in consumed (always up to and
// including a '\n', or 0), and the number of lines answered. Every decision
// is made at now.
func answerLines(out, in []byte, now time.Time, d decide.Allower, limit int) (_ []byte, consumed, lines int) {
	for len(out) < limit {
		tag, n := nextLine(in[consumed:])
		if n == 0 {
			break
		}
		consumed += n
		lines++
		out = appendReply(out, answer(d, now, tag))
	}
	return out, consumed, lines
}
