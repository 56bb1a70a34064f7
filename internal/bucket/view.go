package bucket

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"unsafe"
)

// A View decides queries from a shared table's memory, as a process other
// than the daemon maps it (docs/shared-table.md): it finds the tag, spends
// a token with a compare-and-swap, and leaves the hit in the record for
// the daemon's next report. It holds no lock across its steps and makes
// no system call; it trusts nothing it reads to stay put, bounds every
// offset and loop, and answers Ask whenever it cannot decide.
type View struct {
	ro, rw  []byte
	records []byte
	dirty   []uint64
	counts  []uint64
	shards  int
	shift   uint
	seed    uint64 // mixSeed of the table's seed

	index  atomic.Pointer[policyIndex] // the policy block as last read
	quotas []byte                      // the quota block (quota_shared.go); nil in a table without one
}

// Code is a View's answer.
type Code uint8

const (
	// No: refused in process.
	No Code = iota
	// OK: served in process.
	OK
	// Ask: ask the daemon over its socket (a tag it does not hold yet, a
	// digest key, a reload under way).
	Ask
	// Left: the daemon left the table (stopped, or silent for a second):
	// answer by the fail mode and attach again.
	Left
)

// Decision is a View's answer with what the headers of an HTTP answer
// need.
type Decision struct {
	Code       Code
	Policy     int    // the policy's index
	Limit      uint32 // the policy's burst
	Remaining  int64  // whole tokens left after the query
	RetryAfter int64  // on No: nanoseconds until a token is earned
	Reset      int64  // nanoseconds until the bucket is full

	seq uint32 // the policy sequence the decision was made under (PolicyOf)
}

// ErrNotTable is returned by NewView for memory that is not a table.
var ErrNotTable = errors.New("bucket: not a shared table of this version")

// NewView returns a View over a table file and a state file as mapped.
func NewView(table, state []byte) (*View, error) {
	if len(table) < headerSize || [8]byte(table[:8]) != tableMagic || binary.LittleEndian.Uint32(table[hdrVersion:]) != 1 {
		return nil, ErrNotTable
	}
	le := binary.LittleEndian
	v := &View{ro: table, rw: state}
	v.shards = int(le.Uint32(table[hdrShards:]))
	v.shift = uint(le.Uint32(table[hdrShift:]))
	v.seed = mixSeed(le.Uint64(table[hdrSeed:]))
	recOff, recSize := le.Uint64(table[hdrRecordsOff:]), le.Uint64(table[hdrRecordsSize:])
	dirtyOff, countOff := le.Uint64(table[hdrDirtyOff:]), le.Uint64(table[hdrCountersOff:])
	if v.shards < 1 || v.shards > maxShards || v.shards&(v.shards-1) != 0 || v.shift > 64 ||
		le.Uint32(table[hdrCountedPolicys:]) != countedPolicies || recSize%512 != 0 ||
		recOff > uint64(len(state)) || recSize > uint64(len(state))-recOff ||
		dirtyOff > uint64(len(state)) || recSize/64 > uint64(len(state))-dirtyOff ||
		countOff%8 != 0 || dirtyOff%8 != 0 || recOff%8 != 0 ||
		countOff > uint64(len(state)) || uint64(counterStripes*countedPolicies*counterWords*8) > uint64(len(state))-countOff {
		return nil, ErrNotTable
	}
	v.records = state[recOff : recOff+recSize]
	v.dirty = words(state[dirtyOff : dirtyOff+recSize/64])
	v.counts = words(state[countOff : countOff+uint64(counterStripes*countedPolicies*counterWords*8)])
	if qOff, qn := le.Uint64(table[hdrQuotaOff:]), uint64(le.Uint32(table[hdrQuotaCount:])); qn > 0 && qOff%8 == 0 &&
		qOff <= uint64(len(table)) && qn <= (uint64(len(table))-qOff)/quotaEntrySize && qn <= MaxQuotas {
		v.quotas = table[qOff : qOff+qn*quotaEntrySize]
	}
	return v, nil
}

func (v *View) hdr32(off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&v.ro[off]))) }
func (v *View) hdr64(off int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&v.ro[off]))) }

// casRetries bounds a decision's compare-and-swap attempts on one record.
const casRetries = 64

// Decide answers a query for tag at now (Unix nanoseconds).
func (v *View) Decide(now int64, tag []byte) Decision {
	var d Decision
	v.DecideInto(now, tag, &d)
	return d
}

// DecideInto is Decide, writing the answer to *out and returning its
// Code. A caller that keeps the answer in a variable of its own decides
// into it without copying the answer again.
func (v *View) DecideInto(now int64, tag []byte, out *Decision) Code {
	if len(tag) == 0 {
		return only(out, OK)
	}
	switch st := v.hdr32(hdrState); {
	case st != stateLive && st != stateAsking || now-int64(v.hdr64(hdrHeartbeat)) > 1e9:
		return only(out, Left)
	case st == stateAsking:
		return only(out, Ask)
	}
	seq := v.hdr32(hdrPolicySeq)
	if seq&1 != 0 {
		return only(out, Ask)
	}
	pol, pi, ok := v.policy(seq, tag)
	if !ok {
		return only(out, Ask)
	}
	le := binary.LittleEndian
	action, dry, limit := pol[0], pol[1], le.Uint32(pol[4:])
	per, allowAt := int64(le.Uint64(pol[8:])), int64(le.Uint64(pol[16:]))
	if v.hdr32(hdrPolicySeq) != seq { // the policy read may be torn
		return only(out, Ask)
	}
	switch action {
	case byte(Allow), byte(Deny):
		si, code := cpuStripe(0), OK
		switch {
		case action == byte(Allow):
			v.count(si, pi, 0)
		case dry != 0:
			v.count(si, pi, 0)
			v.count(si, pi, 2)
		default:
			v.count(si, pi, 1)
			code = No
		}
		out.set(code, pi, limit, seq, 0, 0, 0)
		return code
	case byte(Limit):
	default:
		return only(out, Ask)
	}
	if len(tag) > int(v.hdr32(hdrMaxKey)) || pi >= countedPolicies || per < 1 || allowAt < 0 {
		return only(out, Ask)
	}
	h := hashMixed(v.seed, tag)
	si := 0
	if v.shift < 64 {
		si = int(h >> v.shift)
	}
	if si >= v.shards {
		return only(out, Ask)
	}
	stripe := cpuStripe(h)
	rec, tat0 := v.find(si, h, tag)
	if rec == nil {
		return only(out, Ask)
	}
	tatp := (*int64)(unsafe.Pointer(&rec[0]))
	for try := 0; ; try++ {
		if try > 0 { // find read tat0, then saw the tag in the record: so does a retry
			if try == casRetries {
				return only(out, Ask)
			}
			if tat0 = atomic.LoadInt64(tatp); !recordIs(rec, tag) {
				return only(out, Ask)
			}
		}
		if tat0 == deadTat {
			return only(out, Ask)
		}
		if rp := int(le.Uint16(rec[recPolicy:])); rp != pi {
			if rp < quotaBase || try > 0 {
				return only(out, Ask)
			}
			// Under a limit its callers stated (quota_shared.go).
			return v.decideStated(now, rec, tag, tat0, rp-quotaBase, pi, dry, seq, stripe, out)
		}
		tat := max(tat0, now)
		if v.hdr32(hdrPolicySeq) != seq {
			return only(out, Ask)
		}
		if tat-now > allowAt {
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recRefused])), 1) == 1 {
				v.markDirty(rec)
			}
			code := No
			if dry != 0 { // dry run: serve, spend nothing
				v.count(stripe, pi, 0)
				v.count(stripe, pi, 2)
				code = OK
			} else {
				v.count(stripe, pi, 1)
			}
			out.set(code, pi, limit, seq, 0, tat-now-allowAt, tat-now)
			return code
		}
		if atomic.CompareAndSwapInt64(tatp, tat0, tat+per) {
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recUnreported])), 1) == 1 {
				v.markDirty(rec)
			}
			v.count(stripe, pi, 0)
			out.set(OK, pi, limit, seq, (allowAt-(tat-now))/per, 0, tat+per-now) // >= 0: rounds down
			return OK
		}
	}
}

// only answers c with no details.
func only(out *Decision, c Code) Code {
	out.set(c, 0, 0, 0, 0, 0, 0)
	return c
}

// set writes d field by field: a Decision built whole and then copied
// goes through the stack, where the copy's wide loads wait for the
// narrow stores that built it.
func (d *Decision) set(c Code, pi int, limit, seq uint32, remaining, retryAfter, reset int64) {
	d.Code, d.Policy, d.Limit, d.seq = c, pi, limit, seq
	d.Remaining, d.RetryAfter, d.Reset = remaining, retryAfter, reset
}

// find returns the record of tag in shard si, or nil, with its tat as
// read before the record was seen to hold the tag (a record freed and
// given to another tag in between shows that tag).
func (v *View) find(si int, h uint64, tag []byte) (rec []byte, tat int64) {
	w := v.hdr64(headerSize + si*shardEntrySize)
	off, n := (w>>32)*8, w&0xFFFFFFFF
	if n == 0 || off > uint64(len(v.ro)) || n > (uint64(len(v.ro))-off)/8 {
		return nil, 0
	}
	slots := words(v.ro[off : off+n*8])
	frag := uint32(h)
	i := uint64(frag) * n >> 32
	for range n {
		e := atomic.LoadUint64(&slots[i])
		if e == 0 {
			return nil, 0
		}
		if uint32(e>>32) == frag {
			ref := uint64(uint32(e)) * 8
			if ref+recKey < uint64(len(v.records)) { // recordIs bounds the key
				rec := v.records[ref:]
				tat := atomic.LoadInt64((*int64)(unsafe.Pointer(&rec[0])))
				if recordIs(rec, tag) {
					return rec, tat
				}
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil, 0
}

// recordIs reports whether rec holds key, reading its length bounded.
func recordIs(rec, key []byte) bool {
	if len(rec) > recKey && rec[recKey] < 0x80 { // a key shorter than 128 bytes
		l := int(rec[recKey])
		return l == len(key) && len(rec)-recKey-1 >= l && string(rec[recKey+1:recKey+1+l]) == string(key)
	}
	l, w := binary.Uvarint(rec[recKey:min(len(rec), recKey+3)])
	if w <= 0 || l != uint64(len(key)) || uint64(len(rec)-recKey-w) < l {
		return false
	}
	return string(rec[recKey+w:recKey+w+len(key)]) == string(key)
}

func (v *View) markDirty(rec []byte) {
	ref := uint64(uintptr(unsafe.Pointer(&rec[0]))-uintptr(unsafe.Pointer(&v.records[0]))) / 8
	if ref>>6 < uint64(len(v.dirty)) {
		atomic.OrUint64(&v.dirty[ref>>6], 1<<(ref&63))
	}
}

// count adds one to counter k (0 ok, 1 no, 2 dry) of policy pi in stripe si.
func (v *View) count(si, pi, k int) {
	if pi < countedPolicies {
		atomic.AddUint64(&v.counts[(si*countedPolicies+pi)*counterWords+k], 1)
	}
}
