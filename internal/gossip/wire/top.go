// Wire format of a node's heaviest tags (type 9): per policy, the tags it
// refused and served most over its window (package top's Report), so
// that any node answers "who is throttled" for the whole cluster. The
// header is the one every datagram carries (wire.go).
//
// Body: a msgpack array of three elements:
//
//	0  left out, refused: uint, the most a tag of a refused list the
//	   sender left out counted (0 when it left none out)
//	1  left out, served: uint, the same for the served lists
//	2  the lists: an array (fixarray or array16; array32 accepted), each
//	   list an array of five elements:
//	     0  policy name, str (bin accepted)
//	     1  by: uint, 0 refused, 1 served
//	     2  total: uint, every count of the policy in the window
//	     3  floor: uint, the most a tag not listed counted
//	     4  tags: an array of 3n elements, n tags heaviest first, each
//	        its key (str; bin accepted), its count (uint) and its error
//	        (uint): the tag counted at most count and at least
//	        count-error
//
// Integers are written in their smallest msgpack unsigned encoding;
// receivers accept any msgpack integer from 0 to 2^64-1. The array must
// end exactly where the MAC, or the datagram, ends. A sender never
// writes a tag with an empty key or a list with no policy name, and a
// receiver drops them; a receiver skips a list whose by it does not
// know. One datagram is the whole report: a receiver keeps the latest
// report of each sender in place of the one before.

package wire

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dthrottle/dthrottle/internal/top"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// MsgTop carries a node's heaviest tags per policy, refused and served.
const MsgTop MsgType = 9

// TopReport is the body of a MsgTop, package top's own Report, so that a
// report moves between the two without a copy; TopList is one of its
// lists.
type (
	TopReport = top.Report
	TopList   = top.List
)

var (
	errTop     = fmt.Errorf("%w: heaviest tags body is not [uint, uint, lists]", ErrMalformed)
	errTopList = fmt.Errorf("%w: heaviest tags list is not [str, uint, uint, uint, tags]", ErrMalformed)
	errTopTags = fmt.Errorf("%w: heaviest tags' tags are not key, count, error triples", ErrMalformed)
	errUint    = fmt.Errorf("%w: not an integer in [0, 2^64)", ErrMalformed)
)

// topFixed is the size of a body before its lists at its largest: its
// fixarray header, the two left-out counts as uint64 and the lists'
// array16 header. What the counts and the header do not take once the
// lists are chosen goes to their tags.
const topFixed = 1 + 9 + 9 + 3

// EncodeTop emits r as one MsgTop datagram of at most MaxPacket bytes,
// with the next Seq. What does not fit is left out, never split: the
// lists of the highest totals are kept first, as many as their policy
// names and totals fit; then the lists take their tags in turns, one tag
// each per turn, heaviest first, so that every list gets as many tags
// as the others while it has tags and they fit, and a list stops at its
// first tag that does not fit. A list cut short has its floor raised to
// the heaviest tag it lost, and a list left out raises r's LeftOut for
// its by to its heaviest tag or its floor: what is sent states its error
// still. Lists are written in r's order, tags in their list's. Lists
// with no policy name or a by other than refused and served, and tags
// with an empty key, are not sent. dropped counts the tags not sent.
func (e *Encoder) EncodeTop(now time.Time, r TopReport, emit func(pkt []byte) error) (dropped int, err error) {
	if err := e.prepare(); err != nil {
		return 0, err
	}
	trailer := 0
	if len(e.Key) > 0 {
		trailer = macLen
	}
	budget := e.MaxPacket - headerLen - trailer - topFixed
	lists := r.Lists
	left := r.LeftOut
	next := make([]int, len(lists)) // each list's next tag to consider
	sent := make([]int, len(lists)) // and how many it sends; -1: left out
	order := make([]int, 0, len(lists))
	for i, l := range lists {
		if l.Policy == "" || l.By > top.Served {
			sent[i] = -1
			dropped += tagsOf(l)
			continue
		}
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(lists[b].Total, lists[a].Total) })
	kept := order[:0]
	for _, i := range order {
		// A list's fixarray header, its policy, by, total, its floor at
		// its largest (a cut raises it to its heaviest tag at most) and
		// its tags' fixarray header.
		l := lists[i]
		if size := 1 + strLen(len(l.Policy)) + 1 + uintLen(l.Total) + uintLen(heaviest(l)) + 1; size <= budget {
			budget -= size
			kept = append(kept, i)
			continue
		}
		sent[i] = -1
		dropped += tagsOf(l)
		left[l.By] = max(left[l.By], heaviest(l))
	}
	budget += 9 - uintLen(left[top.Refused]) + 9 - uintLen(left[top.Served]) + 3 - arrayLen(len(kept))
	for open := len(kept); open > 0; {
		open = 0
		for _, i := range kept {
			items := lists[i].Items
			for next[i] < len(items) && items[next[i]].Key == "" {
				next[i]++
			}
			if next[i] == len(items) {
				continue
			}
			it := items[next[i]]
			size := strLen(len(it.Key)) + uintLen(it.Count) + uintLen(it.Err)
			size += arrayLen(3*(sent[i]+1)) - arrayLen(3*sent[i]) // fixarray to array16
			if size > budget {
				continue
			}
			budget -= size
			next[i]++
			sent[i]++
			open++
		}
		// A list whose next tag does not fit stops there: it takes no
		// lighter one after it. The turn ends when none took a tag.
	}

	buf := e.buf[:headerLen]
	buf = append(buf, msgpcode.FixedArrayLow|3)
	buf = appendUint64(buf, left[top.Refused])
	buf = appendUint64(buf, left[top.Served])
	buf = appendArrayLen(buf, len(kept))
	for i, l := range lists {
		if sent[i] < 0 {
			continue
		}
		floor := l.Floor
		for _, it := range l.Items[next[i]:] {
			if it.Key != "" {
				floor = max(floor, it.Count)
				dropped++
			}
		}
		buf = append(buf, msgpcode.FixedArrayLow|5)
		buf = appendStr(buf, l.Policy)
		buf = appendUint64(buf, uint64(l.By))
		buf = appendUint64(buf, l.Total)
		buf = appendUint64(buf, floor)
		buf = appendArrayLen(buf, 3*sent[i])
		for _, it := range l.Items[:next[i]] {
			if it.Key == "" {
				continue
			}
			buf = appendStr(buf, it.Key)
			buf = appendUint64(buf, it.Count)
			buf = appendUint64(buf, it.Err)
		}
	}
	return dropped, emit(e.seal(buf, MsgTop, uint64(now.UnixMilli())))
}

// heaviest is the most a tag of l counted, by l: its highest count or
// its floor.
func heaviest(l TopList) uint64 {
	m := l.Floor
	for _, it := range l.Items {
		m = max(m, it.Count)
	}
	return m
}

// tagsOf counts the tags of l that would be sent.
func tagsOf(l TopList) int {
	n := 0
	for _, it := range l.Items {
		if it.Key != "" {
			n++
		}
	}
	return n
}

// strLen is the encoded size of a msgpack str of n bytes.
func strLen(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	}
	return 5 + n
}

// uintLen is the size of v in its smallest msgpack unsigned encoding.
func uintLen(v uint64) int {
	switch {
	case v <= 0x7f:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

// appendUint64 appends v in its smallest msgpack unsigned encoding.
func appendUint64(b []byte, v uint64) []byte {
	if v <= math.MaxUint32 {
		return appendUint(b, uint32(v))
	}
	b = append(b, msgpcode.Uint64)
	return binary.BigEndian.AppendUint64(b, v)
}

// arrayLen is the size of the header appendArrayLen writes.
func arrayLen(n int) int {
	if n < 16 {
		return 1
	}
	return 3
}

// appendArrayLen appends the header of an array of n elements, n below
// 2^16: fixarray or array16.
func appendArrayLen(b []byte, n int) []byte {
	if n < 16 {
		return append(b, msgpcode.FixedArrayLow|byte(n))
	}
	return append(b, msgpcode.Array16, byte(n>>8), byte(n))
}

// decodeTop parses a MsgTop body, which must fill body exactly, into m.
func (st *decodeState) decodeTop(m *Message, body []byte) error {
	st.r.Reset(body)
	d := st.d
	if n, err := d.DecodeArrayLen(); err != nil || n != 3 {
		return errTop
	}
	var r TopReport
	for by := range r.LeftOut {
		v, err := st.decodeUint()
		if err != nil {
			return err
		}
		r.LeftOut[by] = v
	}
	n, err := d.DecodeArrayLen()
	if err != nil || n < 0 {
		return errTop
	}
	// A list takes at least six bytes: check the claim before it sizes
	// anything.
	if n > st.r.Len()/6 {
		return errTruncated
	}
	for range n {
		l, err := st.decodeTopList()
		if err != nil {
			return err
		}
		if l.Policy != "" && l.By <= top.Served {
			r.Lists = append(r.Lists, l)
		}
	}
	if st.r.Len() != 0 {
		return errTrailing
	}
	m.Top = &r
	return nil
}

// decodeTopList reads one list of a MsgTop body.
func (st *decodeState) decodeTopList() (TopList, error) {
	var l TopList
	d := st.d
	if n, err := d.DecodeArrayLen(); err != nil || n != 5 {
		return l, errTopList
	}
	policy, err := st.decodeKey()
	if err != nil {
		return l, err
	}
	l.Policy = string(policy)
	by, err := st.decodeUint()
	if err != nil {
		return l, err
	}
	l.By = top.By(min(by, math.MaxUint8))
	if l.Total, err = st.decodeUint(); err != nil {
		return l, err
	}
	if l.Floor, err = st.decodeUint(); err != nil {
		return l, err
	}
	n, err := d.DecodeArrayLen()
	if err != nil || n < 0 || n%3 != 0 {
		return l, errTopTags
	}
	if n > st.r.Len() {
		return l, errTruncated
	}
	if n > 0 {
		l.Items = make([]topk.Item, 0, n/3)
	}
	for range n / 3 {
		key, err := st.decodeKey()
		if err != nil {
			return l, err
		}
		var it topk.Item
		if len(key) > 0 {
			it.Key = string(key)
		}
		if it.Count, err = st.decodeUint(); err != nil {
			return l, err
		}
		if it.Err, err = st.decodeUint(); err != nil {
			return l, err
		}
		if it.Key != "" {
			l.Items = append(l.Items, it)
		}
	}
	if len(l.Items) == 0 {
		l.Items = nil
	}
	return l, nil
}

// decodeUint reads a msgpack integer that must lie in [0, 2^64).
func (st *decodeState) decodeUint() (uint64, error) {
	c, err := st.d.PeekCode()
	if err != nil {
		return 0, errTruncated
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64):
		v, err := st.d.DecodeUint64()
		if err != nil {
			return 0, errTruncated
		}
		return v, nil
	case c >= msgpcode.NegFixedNumLow || (c >= msgpcode.Int8 && c <= msgpcode.Int64):
		i, err := st.d.DecodeInt64()
		if err != nil {
			return 0, errTruncated
		}
		if i < 0 {
			return 0, errUint
		}
		return uint64(i), nil
	}
	return 0, errUint
}
