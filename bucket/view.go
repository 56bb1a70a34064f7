package bucket

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
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
	return v, nil
}

func (v *View) hdr32(off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&v.ro[off]))) }
func (v *View) hdr64(off int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&v.ro[off]))) }

// casRetries bounds a decision's compare-and-swap attempts on one record.
const casRetries = 64

// Decide answers a query for tag at now (Unix nanoseconds).
func (v *View) Decide(now int64, tag []byte) Decision {
	if len(tag) == 0 {
		return Decision{Code: OK}
	}
	switch st := v.hdr32(hdrState); {
	case st != stateLive && st != stateAsking || now-int64(v.hdr64(hdrHeartbeat)) > 1e9:
		return Decision{Code: Left}
	case st == stateAsking:
		return Decision{Code: Ask}
	}
	seq := v.hdr32(hdrPolicySeq)
	if seq&1 != 0 {
		return Decision{Code: Ask}
	}
	pol, pi, ok := v.policy(tag)
	if !ok {
		return Decision{Code: Ask}
	}
	d := Decision{Policy: pi, Limit: binary.LittleEndian.Uint32(pol[4:]), seq: seq}
	action, dry := pol[0], pol[1]
	if v.hdr32(hdrPolicySeq) != seq { // the policy read may be torn
		return Decision{Code: Ask}
	}
	switch action {
	case byte(Allow):
		v.count(cpuStripe(0), pi, 0)
		d.Code = OK
		return d
	case byte(Deny):
		si := cpuStripe(0)
		if dry != 0 {
			v.count(si, pi, 0)
			v.count(si, pi, 2)
			d.Code = OK
			return d
		}
		v.count(si, pi, 1)
		return d
	case byte(Limit):
	default:
		return Decision{Code: Ask}
	}
	if len(tag) > int(v.hdr32(hdrMaxKey)) || pi >= countedPolicies {
		return Decision{Code: Ask}
	}
	le := binary.LittleEndian
	per, allowAt := int64(le.Uint64(pol[8:])), int64(le.Uint64(pol[16:]))
	if per < 1 || allowAt < 0 {
		return Decision{Code: Ask}
	}
	h := hashMixed(v.seed, tag)
	si := 0
	if v.shift < 64 {
		si = int(h >> v.shift)
	}
	if si >= v.shards {
		return Decision{Code: Ask}
	}
	stripe := cpuStripe(h)
	rec := v.find(si, h, tag)
	if rec == nil {
		return Decision{Code: Ask}
	}
	tatp := (*int64)(unsafe.Pointer(&rec[0]))
	for range casRetries {
		tat0 := atomic.LoadInt64(tatp)
		if !recordIs(rec, tag) || tat0 == deadTat || int(le.Uint16(rec[recPolicy:])) != pi {
			return Decision{Code: Ask}
		}
		tat := max(tat0, now)
		if v.hdr32(hdrPolicySeq) != seq {
			return Decision{Code: Ask}
		}
		if tat-now > allowAt {
			d.Reset = tat - now
			d.RetryAfter = tat - now - allowAt
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recRefused])), 1) == 1 {
				v.markDirty(rec)
			}
			if dry != 0 { // dry run: serve, spend nothing
				v.count(stripe, pi, 0)
				v.count(stripe, pi, 2)
				d.Code = OK
				return d
			}
			v.count(stripe, pi, 1)
			return d
		}
		if atomic.CompareAndSwapInt64(tatp, tat0, tat+per) {
			if atomic.AddUint32((*uint32)(unsafe.Pointer(&rec[recUnreported])), 1) == 1 {
				v.markDirty(rec)
			}
			v.count(stripe, pi, 0)
			d.Code = OK
			d.Reset = tat + per - now
			d.Remaining = (allowAt - (tat - now)) / per // >= 0: rounds down
			return d
		}
	}
	return Decision{Code: Ask}
}

// policy finds tag's policy in the block in force: its 32 bytes and
// index, or false when the block does not hold together.
func (v *View) policy(tag []byte) (pol []byte, pi int, ok bool) {
	le := binary.LittleEndian
	off := v.hdr64(hdrPolicyActive)
	if off > uint64(len(v.ro))-16 {
		return nil, 0, false
	}
	b := v.ro[off:]
	n, nodes, edges := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[8:]))
	size := 16 + 32*n + 8*nodes + 8*edges
	if n == 0 || nodes == 0 || size > policyBlockMax || size > uint64(len(b)) {
		return nil, 0, false
	}
	nb := b[16+32*n:]
	eb := nb[8*nodes:]
	best, node := 0, uint64(0)
	for i := 0; i < len(tag); i++ {
		nd := nb[8*node:]
		first, cnt := uint64(le.Uint32(nd)), uint64(le.Uint16(nd[4:]))
		if cnt == 0 || first+cnt > edges {
			break
		}
		lo, hi := first, first+cnt
		for lo < hi {
			m := (lo + hi) / 2
			if eb[8*m] < tag[i] {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == first+cnt || eb[8*lo] != tag[i] {
			break
		}
		if node = uint64(le.Uint32(eb[8*lo+4:])); node >= nodes {
			return nil, 0, false
		}
		if p := int(le.Uint16(nb[8*node+6:])); p != 0 {
			best = p
		}
	}
	if uint64(best) >= n {
		return nil, 0, false
	}
	return b[16+32*best : 16+32*best+32], best, true
}

// PolicyOf returns the policy that made decision d, as the block in
// force states it (name, action, burst, rate, dry run; no prefix), for
// the headers of its answer; ok is false once the policies changed since
// (a reload may have given the index to another policy).
func (v *View) PolicyOf(d Decision) (p Policy, ok bool) {
	if d.seq != v.hdr32(hdrPolicySeq) {
		return Policy{}, false
	}
	return v.Policy(d.Policy)
}

// Policy returns policy pi of the block in force as far as the block
// tells it (name, action, burst, rate, dry run; no prefix). ok is false
// while the daemon rewrites the policies, for an index the block does not
// hold, and for a block that does not hold together. A block without
// names, or whose names run past it, gives the default's name, "default",
// and the index for the others.
func (v *View) Policy(pi int) (p Policy, ok bool) {
	le := binary.LittleEndian
	seq := v.hdr32(hdrPolicySeq)
	off := v.hdr64(hdrPolicyActive)
	if seq&1 != 0 || pi < 0 || off > uint64(len(v.ro))-16 {
		return Policy{}, false
	}
	b := v.ro[off:]
	n, nodes, edges := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[8:]))
	names := uint64(le.Uint32(b[12:]))
	size := 16 + 32*n + 8*nodes + 8*edges
	if uint64(pi) >= n || size > policyBlockMax || size > uint64(len(b)) {
		return Policy{}, false
	}
	if size+names > uint64(len(b)) {
		names = 0
	}
	pol := b[16+32*pi:]
	p = Policy{Action: Action(pol[0]), DryRun: pol[1] != 0, Burst: int(le.Uint32(pol[4:])),
		Rate: math.Float64frombits(le.Uint64(pol[24:]))}
	nb := b[size : size+names]
	for i := 0; len(nb) >= 2; i++ {
		k := int(le.Uint16(nb))
		if k > len(nb)-2 {
			break
		}
		if i == pi {
			p.Name = string(nb[2 : 2+k])
			break
		}
		nb = nb[2+k:]
	}
	if p.Name == "" {
		p.Name = "default"
		if pi > 0 {
			p.Name = strconv.Itoa(pi)
		}
	}
	if v.hdr32(hdrPolicySeq) != seq {
		return Policy{}, false
	}
	return p, true
}

// find returns the record of tag in shard si, or nil.
func (v *View) find(si int, h uint64, tag []byte) []byte {
	w := v.hdr64(headerSize + si*shardEntrySize)
	off, n := (w>>32)*8, w&0xFFFFFFFF
	if n == 0 || off > uint64(len(v.ro)) || n > (uint64(len(v.ro))-off)/8 {
		return nil
	}
	slots := words(v.ro[off : off+n*8])
	frag := uint32(h)
	i := uint64(frag) * n >> 32
	for range n {
		e := atomic.LoadUint64(&slots[i])
		if e == 0 {
			return nil
		}
		if uint32(e>>32) == frag {
			ref := uint64(uint32(e)) * 8
			if ref+recKey < uint64(len(v.records)) { // recordIs bounds the key
				if rec := v.records[ref:]; recordIs(rec, tag) {
					return rec
				}
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil
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
