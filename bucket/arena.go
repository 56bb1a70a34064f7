package bucket

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
)

// A shard keeps each tracked tag in one record of its arena: a few bytes of
// bucket state followed by the key. Records live in byte chunks that are
// allocated once and never freed, so the garbage collector sees a handful
// of pointer-free byte slices per shard, however many tags it tracks, and
// filling the table leaves no garbage behind.
//
// Record layout (little-endian):
//
//	[0:8]   tat, int64 nanoseconds
//	[8:12]  unreported, uint32
//	[12:16] dirtyPos, int32: 1 + position in shard.dirty, 0 when not listed
//	[16:18] policy index, uint16; freePolicy marks a free record
//	[18:]   key length as a uvarint, then the key bytes
//
// A free record holds the reference of the next free record of its size
// class in its first 4 bytes.
const (
	recUnreported = 8
	recDirty      = 12
	recPolicy     = 16
	recKey        = 18

	// freePolicy is the policy index of a free record. Policy indexes are
	// below it: a policy set has at most math.MaxUint16 policies.
	freePolicy = 0xFFFF
)

// A reference names a record: its chunk's index in the high bits and its
// offset in the chunk, in 8-byte units, in the low refOffBits. Reference 0
// is never a record (chunk 0 is always nil).
const (
	chunkBits  = 14
	chunkSize  = 1 << chunkBits // records up to this size share chunks
	refOffBits = chunkBits - 3
	refOffMask = 1<<refOffBits - 1
	maxChunks  = 1 << (32 - refOffBits)
)

// Size classes: records up to smallMax bytes round up to a multiple of 8;
// larger ones to a power of two. The largest record holds a key of
// 65537 bytes (a digest key at the highest max_tag_bytes).
const (
	smallMax   = 512
	numClasses = smallMax/8 + 1 + (17 - 9)
)

// arena allocates and frees the records of one shard. A freed record is
// reused for the next record of its size class, so the arena never holds
// more records of a class than were ever live at once: under churn
// through a capped table its size stays bounded. The zero value is not
// usable: call init. Not safe for concurrent use (the shard's lock guards
// it).
type arena struct {
	chunks [][]byte
	pub    atomic.Pointer[[][]byte] // chunks, for readers without the lock
	cur    int                      // chunk being filled, or 0 when none
	off    int                      // next free byte in chunks[cur]
	free   [numClasses]uint32
	bytes  int // total size of the chunks
}

func (a *arena) init() {
	a.chunks = make([][]byte, 1, 8)
	a.publish()
}

// publish makes the chunks visible to prefetchRecord. Chunks only ever
// append: a reader with an older view never reads past its length.
func (a *arena) publish() {
	c := a.chunks
	a.pub.Store(&c)
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

// alloc returns a record of the size class, whose contents are undefined.
func (a *arena) alloc(class, size int) uint32 {
	if ref := a.free[class]; ref != 0 {
		a.free[class] = binary.LittleEndian.Uint32(a.rec(ref))
		return ref
	}
	if size > chunkSize {
		return a.newChunk(size)
	}
	if a.cur == 0 || a.off+size > chunkSize {
		// The rest of the current chunk, less than size, stays unused.
		a.newChunk(chunkSize)
		a.cur, a.off = len(a.chunks)-1, 0
	}
	ref := uint32(a.cur)<<refOffBits | uint32(a.off>>3)
	a.off += size
	return ref
}

// newChunk adds a chunk of size bytes and returns a reference to its start.
func (a *arena) newChunk(size int) uint32 {
	if len(a.chunks) >= maxChunks {
		// 32 GiB of records in one shard: memory runs out long before.
		panic("bucket: shard arena full")
	}
	a.chunks = append(a.chunks, make([]byte, size))
	a.bytes += size
	a.publish()
	return uint32(len(a.chunks)-1) << refOffBits
}

// release puts the record back on its class's free list.
func (a *arena) release(ref uint32) {
	r := a.rec(ref)
	class, _ := sizeClass(recordSize(len(r.key())))
	binary.LittleEndian.PutUint32(r, a.free[class])
	binary.LittleEndian.PutUint16(r[recPolicy:], freePolicy)
	a.free[class] = ref
}

// rec returns the record ref names. The slice may extend past the record.
func (a *arena) rec(ref uint32) record {
	return a.chunks[ref>>refOffBits][(ref&refOffMask)<<3:]
}

// newRecord allocates and fills a record for key, with a full bucket at
// now under policy pi, not listed for drain.
func (a *arena) newRecord(key []byte, now int64, pi int) uint32 {
	class, size := sizeClass(recordSize(len(key)))
	ref := a.alloc(class, size)
	r := a.rec(ref)
	r.setTat(now)
	r.setUnreported(0)
	r.setDirtyPos(0)
	r.setPolicy(pi)
	n := binary.PutUvarint(r[recKey:], uint64(len(key)))
	copy(r[recKey+n:], key)
	return ref
}

// record is a view of one record's bytes; see the layout above.
type record []byte

func (r record) tat() int64         { return int64(binary.LittleEndian.Uint64(r)) }
func (r record) setTat(v int64)     { binary.LittleEndian.PutUint64(r, uint64(v)) }
func (r record) unreported() uint32 { return binary.LittleEndian.Uint32(r[recUnreported:]) }
func (r record) setUnreported(v uint32) {
	binary.LittleEndian.PutUint32(r[recUnreported:], v)
}
func (r record) dirtyPos() int32     { return int32(binary.LittleEndian.Uint32(r[recDirty:])) }
func (r record) setDirtyPos(v int32) { binary.LittleEndian.PutUint32(r[recDirty:], uint32(v)) }
func (r record) policy() int         { return int(binary.LittleEndian.Uint16(r[recPolicy:])) }
func (r record) setPolicy(pi int)    { binary.LittleEndian.PutUint16(r[recPolicy:], uint16(pi)) }

// key returns the record's key, aliasing the arena.
func (r record) key() []byte {
	if n := r[recKey]; n < 0x80 {
		return r[recKey+1 : recKey+1+int(n)]
	}
	return r.longKey()
}

// longKey is key for a key of 128 bytes or more.
func (r record) longKey() []byte {
	n, w := binary.Uvarint(r[recKey:])
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
