package bucket

import (
	"encoding/binary"
	"math/bits"
	"sort"
	"sync/atomic"
	"unsafe"
)

// A shard keeps each tracked tag in one record of the region's record
// area (region.go): a few bytes of bucket state followed by the key. The
// records are in the state file, which processes deciding from the shared
// table write, so the daemon reads them as untrusted input: it keeps what
// it needs to walk them (which chunks are its own, each chunk's size
// class, which records are live, the free lists) in its own memory, and
// bounds every key it reads. docs/shared-table.md lays records out:
//
//	[0:8]   tat, int64 nanoseconds (atomic; compare-and-swap only)
//	[8:12]  unreported, uint32 (atomic)
//	[12:16] refused, uint32 (callers add atomically; the daemon adds
//	        under the shard's lock, plainly: refusedRec)
//	[16:18] policy index, uint16; freePolicy marks a free record
//	[18:]   key length as a uvarint, then the key bytes
const (
	recUnreported = 8
	recRefused    = 12
	recPolicy     = 16
	recKey        = 18

	// freePolicy is the policy index of a free record. Policy indexes are
	// below it: a policy set has at most math.MaxUint16 policies.
	freePolicy = 0xFFFF
)

// A reference names a record: its offset in the record area in 8-byte
// units. Reference 0 is never a record. Records of one size class share
// chunks of chunkSize bytes; a larger record has a chunk of its own.
const (
	chunkBits = 14
	chunkSize = 1 << chunkBits
)

// Size classes: records up to smallMax bytes round up to a multiple of 8;
// larger ones to a power of two. The largest record holds a key of
// 65537 bytes (a digest key at the highest max_tag_bytes).
const (
	smallMax   = 512
	numClasses = smallMax/8 + 1 + (17 - 9)
)

// maxKeyLen bounds a key length read from a record.
const maxKeyLen = MaxTagBytesLimit + 1

// chunk is one of a shard's chunks, as the shard knows it.
type chunk struct {
	ref   uint32   // its first unit
	units uint32   // its size in units
	size  uint32   // the size of its records in bytes
	used  uint32   // bytes handed out
	live  []uint64 // a bit per unit: a live record starts there
}

// arena allocates and frees the records of one shard. A freed record is
// reused for the next record of its size class, so the arena never holds
// more records of a class than were ever live at once: under churn
// through a capped table its size stays bounded. Not safe for concurrent
// use (the shard's lock guards it).
type arena struct {
	reg     *region
	chunks  []chunk // by ref, which only grows
	cur     [numClasses]int32
	free    [numClasses][]uint32
	bytes   int    // total size of the chunks
	largest uint32 // the size of the largest record handed out
	seed    uint64 // the table's hash seed: a record's key hashes to its slot (trust.go)
}

func (a *arena) init(reg *region) {
	a.reg = reg
	for i := range a.cur {
		a.cur[i] = -1
	}
}

// sizeClass returns the class of a record of n bytes and the bytes the
// class allocates.
func sizeClass(n int) (class, size int) {
	if n <= smallMax {
		c := (n + 7) >> 3
		return c, c << 3
	}
	b := bits.Len(uint(n - 1))
	return smallMax/8 + b - 9, 1 << b
}

// recordSize is the size of the record for a key of n bytes.
func recordSize(n int) int {
	return recKey + uvarintLen(n) + n
}

func uvarintLen(n int) int {
	return (bits.Len(uint(n)|1) + 6) / 7
}

// alloc returns a record of the size class, whose contents are undefined,
// or 0 when the region has no room.
func (a *arena) alloc(class, size int) uint32 {
	if f := a.free[class]; len(f) > 0 {
		ref := f[len(f)-1]
		a.free[class] = f[:len(f)-1]
		a.setLive(ref, true)
		return ref
	}
	if ci := a.cur[class]; ci >= 0 {
		c := &a.chunks[ci]
		if int(c.used)+size <= int(c.units)*8 {
			ref := c.ref + c.used/8
			c.used += uint32(size)
			a.setLive(ref, true)
			return ref
		}
	}
	n := max(size, chunkSize)
	ref := a.reg.allocChunk(n)
	if ref == 0 {
		return 0
	}
	units := uint32(n / 8)
	a.chunks = append(a.chunks, chunk{ref: ref, units: units, size: uint32(size), used: uint32(size), live: make([]uint64, (units+63)/64)})
	a.cur[class] = int32(len(a.chunks) - 1)
	a.bytes += n
	a.largest = max(a.largest, uint32(size))
	a.setLive(ref, true)
	return ref
}

// chunkOf returns the chunk holding ref.
func (a *arena) chunkOf(ref uint32) *chunk {
	i := sort.Search(len(a.chunks), func(i int) bool { return a.chunks[i].ref > ref }) - 1
	return &a.chunks[i]
}

func (a *arena) setLive(ref uint32, on bool) {
	c := a.chunkOf(ref)
	u := ref - c.ref
	if on {
		c.live[u>>6] |= 1 << (u & 63)
	} else {
		c.live[u>>6] &^= 1 << (u & 63)
	}
}

// release puts the record back on its class's free list. Its tat must be
// deadTat already.
func (a *arena) release(ref uint32) {
	c := a.chunkOf(ref)
	class, _ := sizeClass(int(c.size))
	a.rec(ref).setPolicy(freePolicy)
	a.setLive(ref, false)
	a.free[class] = append(a.free[class], ref)
}

// rec returns the record ref names. The slice extends past the record.
func (a *arena) rec(ref uint32) record {
	return a.reg.records[uint64(ref)<<3:]
}

// newRecord allocates and fills a record for key, with a full bucket at
// now under policy pi, or returns 0 when the region has no room.
func (a *arena) newRecord(key []byte, now int64, pi int) uint32 {
	class, size := sizeClass(recordSize(len(key)))
	ref := a.alloc(class, size)
	if ref == 0 {
		return 0
	}
	r := a.rec(ref)
	atomic.StoreUint32(r.u32(recUnreported), 0)
	atomic.StoreUint32(r.u32(recRefused), 0)
	r.setPolicy(pi)
	n := binary.PutUvarint(r[recKey:], uint64(len(key)))
	copy(r[recKey+n:], key)
	atomic.StoreInt64(r.tatp(), now)
	return ref
}

// record is a view of one record's bytes; see the layout above.
type record []byte

func (r record) tatp() *int64        { return (*int64)(unsafe.Pointer(&r[0])) }
func (r record) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r[off])) }
func (r record) tat() int64          { return atomic.LoadInt64(r.tatp()) }
func (r record) casTat(old, new int64) bool {
	return atomic.CompareAndSwapInt64(r.tatp(), old, new)
}

// kill marks the record as being freed, so that callers deciding in
// process ask instead, and returns its unreported hits.
func (r record) kill() uint32 {
	atomic.StoreInt64(r.tatp(), deadTat)
	atomic.SwapUint32(r.u32(recRefused), 0)
	return atomic.SwapUint32(r.u32(recUnreported), 0)
}

func (r record) unreported() uint32 { return atomic.LoadUint32(r.u32(recUnreported)) }
func (r record) refusedCount() uint32 {
	return atomic.LoadUint32(r.u32(recRefused))
}

// addUnreported adds n unreported hits, saturating, and returns the count
// before.
func (r record) addUnreported(n uint32) uint32 {
	p := r.u32(recUnreported)
	for {
		u := atomic.LoadUint32(p)
		v := u + n
		if v < u {
			v = ^uint32(0)
		}
		if atomic.CompareAndSwapUint32(p, u, v) {
			return u
		}
	}
}

func (r record) takeUnreported() uint32 { return atomic.SwapUint32(r.u32(recUnreported), 0) }
func (r record) takeRefused() uint32    { return atomic.SwapUint32(r.u32(recRefused), 0) }

// policy returns the record's policy index, which a caller may have
// overwritten: check it against the policy set.
func (r record) policy() int      { return int(binary.LittleEndian.Uint16(r[recPolicy:])) }
func (r record) setPolicy(pi int) { binary.LittleEndian.PutUint16(r[recPolicy:], uint16(pi)) }

// longKey is the key of 128 bytes or more the record holds, for is to
// compare with. Its length is read from the record and bounded, so a
// key a caller overwrote never reaches past the area's guard; whatever
// keeps or sends a key read back takes it through ownKey (trust.go).
func (r record) longKey() []byte {
	n, w := binary.Uvarint(r[recKey : recKey+4])
	if w <= 0 || n > maxKeyLen {
		return nil
	}
	return r[recKey+w : recKey+w+int(n)]
}

// is reports whether the record's key is key.
func (r record) is(key []byte) bool {
	n := len(key)
	if n >= 0x80 {
		return string(r.longKey()) == string(key)
	}
	if r[recKey] != byte(n) {
		return false
	}
	k := r[recKey+1 : recKey+1+n]
	if n >= 8 && n <= 16 {
		// Two overlapping words: no call to the general comparison for
		// the most common lengths (an IPv4 address is 7 to 15 bytes).
		le := binary.LittleEndian
		return le.Uint64(k) == le.Uint64(key) && le.Uint64(k[n-8:]) == le.Uint64(key[n-8:])
	}
	return string(k) == string(key)
}
