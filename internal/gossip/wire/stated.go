// Wire format of hits and levels under limits callers state (a
// bucket.Quota: Gubernator's per-request limits and the like), which
// every peer needs to apply the hits under the same limit.
//
// Body of a hits datagram under stated limits (type 12): one msgpack map
// (fixmap, map16 or map32) from tag key (str; bin accepted) to a fixarray
// of 5 elements:
//
//	0  hits, an unsigned integer in [1, 2^32), as in a hits datagram
//	1  algorithm: 0 leaky bucket, 1 window
//	2  burst (leaky) or hits per window, an unsigned integer
//	3  leaky: the rate in tokens a second, a float64 (0xcb); window: the
//	   window's length in nanoseconds, an unsigned integer
//	4  calendar unit of a window: 0 none, 1 minute, 2 hour, 3 day,
//	   4 week, 5 month, 6 year (UTC)
//
// A snapshot answer (type 3, snapshot.go) carries a tag under a stated
// limit the same way: its level is then a fixarray of 5 whose element 0
// is the level in tokens (a float64) and elements 1 to 4 as above. A
// datagram of either kind holds entries of one sort only, plain or
// stated, so that a receiver from before stated limits (which ignores
// type 12, and drops a snapshot datagram with an array level as
// malformed) still takes every plain hit and level.
//
// An entry whose limit is out of range (bucket.Quota.Check) makes the
// datagram malformed: a sender never writes one.

package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// MsgStatedHits carries hits served under limits callers stated.
const MsgStatedHits MsgType = 12 // body: tag → [hits, algorithm, burst, rate or window, calendar]

var (
	errStated = fmt.Errorf("%w: stated limit is not [n, algorithm, burst, rate or window, calendar]", ErrMalformed)
	errQuota  = fmt.Errorf("%w: stated limit out of range", ErrMalformed)
)

// stated reports whether h was served under a stated limit.
func stated(q bucket.Quota) bool { return q.Burst != 0 }

// quotaLen is the encoded size of elements 1 to 4 of a stated entry.
func quotaLen(q bucket.Quota) int {
	return 1 + uintLen(uint64(q.Burst)) + 9 + 1
}

// appendQuota appends elements 1 to 4 of a stated entry.
func appendQuota(b []byte, q bucket.Quota) []byte {
	b = append(b, byte(q.Algorithm))
	b = appendUint(b, uint32(q.Burst))
	if q.Algorithm == bucket.Window {
		b = append(b, msgpcode.Uint64)
		b = binary.BigEndian.AppendUint64(b, uint64(q.Period))
	} else {
		b = append(b, msgpcode.Double)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Rate))
	}
	return append(b, byte(q.Calendar))
}

// decodeQuota reads elements 1 to 4 of a stated entry and checks the
// limit.
func (st *decodeState) decodeQuota() (bucket.Quota, error) {
	var q bucket.Quota
	alg, err := st.decodeCount()
	if err != nil {
		return q, err
	}
	burst, err := st.decodeCount()
	if err != nil {
		return q, err
	}
	q.Algorithm, q.Burst = bucket.Algorithm(min(alg, 255)), int(burst)
	if q.Algorithm == bucket.Window {
		c, err := st.d.PeekCode()
		if err != nil || !(c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64)) {
			return q, errStated
		}
		ns, err := st.d.DecodeUint64()
		if err != nil {
			return q, errTruncated
		}
		q.Period = time.Duration(min(ns, math.MaxInt64))
	} else {
		c, err := st.d.PeekCode()
		if err != nil || (c != msgpcode.Double && c != msgpcode.Float) {
			return q, errStated
		}
		if q.Rate, err = st.d.DecodeFloat64(); err != nil {
			return q, errTruncated
		}
	}
	cal, err := st.decodeCount()
	if err != nil {
		return q, err
	}
	q.Calendar = bucket.Calendar(min(cal, 255))
	if q.Calendar != bucket.None {
		q.Period = 0
	}
	if q.Check() != nil {
		return q, errQuota
	}
	return q, nil
}

// decodeStatedArray reads the fixarray header of a stated entry.
func (st *decodeState) decodeStatedArray() error {
	n, err := st.d.DecodeArrayLen()
	if err != nil || n != 5 {
		return errStated
	}
	return nil
}
