package bucket

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// This file owns the quota block of a shared table (docs/shared-table.md,
// "Quota block"): the limits callers stated (quota.go), published so
// that processes deciding from the table decide a tag under its stated
// limit in process, as the daemon does, once the daemon has given the
// tag's record that limit. An entry is written under a sequence lock:
// its sequence is odd while it changes, and a reader that sees it odd,
// or changed across its read, asks the daemon.
//
//	[0:4]   seq, uint32: even when stable, odd while written; 0 never written
//	[4]     kind: 0 free, 1 leaky bucket, 2 window aligned to its length,
//	        3 calendar window (readers ask the daemon)
//	[5]     calendar unit (kind 3)
//	[6:8]   reserved
//	[8:12]  burst, or hits per window, uint32
//	[12:16] reserved
//	[16:24] per_token, int64 nanoseconds
//	[24:32] window, int64 nanoseconds (kinds 2 and 3; 0 for kind 1)
const quotaEntrySize = 32

// The kinds of a quota entry.
const (
	quotaFree     = 0
	quotaLeaky    = 1
	quotaWindow   = 2
	quotaCalendar = 3
)

// writeQuota publishes slot i's compiled limit c, or frees the entry for
// a nil c. The registry's lock orders writers.
func (r *region) writeQuota(i int, c *compiled) {
	e := r.quotas[i*quotaEntrySize : (i+1)*quotaEntrySize]
	seq := (*uint32)(unsafe.Pointer(&e[0]))
	s := atomic.LoadUint32(seq)
	atomic.StoreUint32(seq, s|1)
	kind, cal := byte(quotaFree), byte(0)
	var burst uint32
	var per, window int64
	if c != nil {
		burst, per, window = uint32(c.Burst), c.perToken, c.window
		switch {
		case c.window == 0:
			kind = quotaLeaky
		case c.quota.Calendar != None:
			kind, cal = quotaCalendar, byte(c.quota.Calendar)
		default:
			kind = quotaWindow
		}
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&e[4])), uint32(kind)|uint32(cal)<<8)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&e[8])), uint64(burst))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&e[16])), uint64(per))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&e[24])), uint64(window))
	atomic.StoreUint32(seq, (s|1)+1)
}

// statedLimit is a quota entry as a View read it, whole.
type statedLimit struct {
	burst   uint32
	per     int64
	allowAt int64
	window  int64 // 0 for a leaky bucket
}

// quota reads entry i of the quota block, or false when it is not a
// limit a View decides under (free, a calendar window, being written,
// out of range, or not holding together).
func (v *View) quota(i int) (statedLimit, bool) {
	var q statedLimit
	if v.quotas == nil || i < 0 || i >= len(v.quotas)/quotaEntrySize {
		return q, false
	}
	e := v.quotas[i*quotaEntrySize:]
	seq := (*uint32)(unsafe.Pointer(&e[0]))
	s := atomic.LoadUint32(seq)
	kind := atomic.LoadUint32((*uint32)(unsafe.Pointer(&e[4]))) & 0xFF
	q.burst = uint32(atomic.LoadUint64((*uint64)(unsafe.Pointer(&e[8]))))
	q.per = int64(atomic.LoadUint64((*uint64)(unsafe.Pointer(&e[16]))))
	q.window = int64(atomic.LoadUint64((*uint64)(unsafe.Pointer(&e[24]))))
	if s&1 != 0 || s == 0 || atomic.LoadUint32(seq) != s {
		return q, false
	}
	switch {
	case kind == quotaLeaky && q.window == 0:
	case kind == quotaWindow && q.window > 0:
	default:
		return q, false
	}
	if q.burst < 1 || q.per < 1 || q.per > maxAhead/int64(q.burst) {
		return q, false
	}
	q.allowAt = int64(q.burst-1) * q.per
	return q, true
}

// at is the instant a bucket under q stands at when the clock reads now:
// now, or the start of its window.
func (q *statedLimit) at(now int64) int64 {
	if q.window == 0 {
		return now
	}
	w := now - now%q.window
	if w > now {
		w -= q.window
	}
	return w
}

// ceil is the start of the first window under q starting at or after t.
func (q *statedLimit) ceil(t int64) int64 {
	w := q.at(t)
	if w < t {
		w += q.window
	}
	return w
}

// decideStated is DecideInto's decision for record rec of tag, whose tat
// it read as tat0, when the record holds the stated limit of quota entry
// k rather than its policy pi: the same steps under the limit's burst,
// period and window, counted under pi.
func (v *View) decideStated(now int64, rec, tag []byte, tat0 int64, k, pi int, dry byte, seq uint32, stripe int, out *Decision) Code {
	q, ok := v.quota(k)
	if !ok {
		return only(out, Ask)
	}
	tatp := (*int64)(unsafe.Pointer(&rec[0]))
	at := q.at(now)
	for try := 0; ; try++ {
		if try > 0 {
			if try == casRetries {
				return only(out, Ask)
			}
			if tat0 = atomic.LoadInt64(tatp); !recordIs(rec, tag) {
				return only(out, Ask)
			}
		}
		if tat0 == deadTat || int(binary.LittleEndian.Uint16(rec[recPolicy:])) != quotaBase+k {
			return only(out, Ask)
		}
		tat := max(tat0, at)
		if v.hdr32(hdrPolicySeq) != seq {
			return only(out, Ask)
		}
		if tat-at > q.allowAt {
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recRefused])), 1) == 1 {
				v.markDirty(rec)
			}
			code := No
			if dry != 0 {
				v.count(stripe, pi, 0)
				v.count(stripe, pi, 2)
				code = OK
			} else {
				v.count(stripe, pi, 1)
			}
			retry, reset := tat-at-q.allowAt, tat-at
			if q.window != 0 {
				retry, reset = q.ceil(tat-q.allowAt)-now, q.ceil(tat)-now
			}
			out.set(code, pi, q.burst, seq, 0, retry, reset)
			return code
		}
		if atomic.CompareAndSwapInt64(tatp, tat0, tat+q.per) {
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recUnreported])), 1) == 1 {
				v.markDirty(rec)
			}
			v.count(stripe, pi, 0)
			reset := tat + q.per - now
			if q.window != 0 {
				reset = q.ceil(tat+q.per) - now
			}
			out.set(OK, pi, q.burst, seq, (q.allowAt-(tat-at))/q.per, 0, reset)
			return OK
		}
	}
}
