package protocol

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// batchMax is the most queries one AllowBatch call is given.
const batchMax = 64

// batcher answers lines through a decide.BatchAllower. It is used by one
// connection only.
type batcher struct {
	d    decide.BatchAllower
	tags [][]byte
	ok   []bool
}

// newBatcher returns a batcher whose buffers are made on first use, so an
// idle connection costs nothing more for it.
func newBatcher(d decide.BatchAllower) *batcher { return &batcher{d: d} }

// answer is answerLines through b.d: the same replies for the same lines,
// in order, with the same limit on out.
func (b *batcher) answer(out, in []byte, now time.Time, limit int) (_ []byte, consumed, lines int) {
	if b.ok == nil {
		b.tags, b.ok = make([][]byte, 0, batchMax), make([]bool, batchMax)
	}
	for len(out) < limit {
		// Collect the non-empty lines in front, as many as the limit on
		// out lets through.
		tags := b.tags[:0]
		n, due := 0, len(out)
		for len(tags) < batchMax && due < limit {
			tag, m := nextLine(in[consumed+n:])
			if m == 0 || len(tag) == 0 {
				break
			}
			tags = append(tags, tag)
			n += m
			due += replyLen
		}
		if len(tags) > 0 {
			ok := b.ok[:len(tags)]
			b.d.AllowBatch(now, tags, ok)
			for _, o := range ok {
				out = appendReply(out, o)
			}
			clear(tags) // keep no reference into the read buffer
			consumed += n
			lines += len(tags)
			continue
		}
		// An empty line in front, or no complete line.
		tag, m := nextLine(in[consumed:])
		if m == 0 {
			break
		}
		out = appendReply(out, answer(b.d, now, tag))
		consumed += m
		lines++
	}
	return out, consumed, lines
}
