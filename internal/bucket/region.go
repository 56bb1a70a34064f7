package bucket

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A region is the memory a table lives in: the table file, which only the
// daemon writes (header, shard entries, policy blocks, index slots), and
// the state file, which every process that decides from the table writes
// (records, dirty bitmap, counters). docs/shared-table.md lays out both
// field by field. A shared region is two memfds that other processes may
// map (Config.Shared); otherwise the same layout lives in private
// anonymous memory. Either way the files are sized up front for the most
// tags the table may hold and are sparse: only the pages written take
// memory, so a small table stays small.
type region struct {
	ro, rw         []byte   // the table file and the state file, mapped
	roFile, rwFile *os.File // the memfds; nil when not shared

	records []byte   // the record area, in rw
	dirty   []uint64 // the dirty bitmap, in rw: a bit per 8-byte unit of records
	counts  []uint64 // the counters, in rw: 4 words per shard and policy
	next    atomic.Uint64

	policyBlocks [2]uint64 // offsets of the two policy blocks
	policyNext   int       // the block the next policy set is written to
	indexAreas   [][2][]uint64
	quotas       []byte // the quota block, in ro (quota_shared.go)
}

// Layout constants (docs/shared-table.md).
const (
	headerSize      = 4096
	shardEntrySize  = 64
	policyBlockMax  = 16 << 20
	maxPolicyName   = 255 // the longest policy name the block carries; longer ones are cut
	countedPolicies = 1024
	// counterStripes spreads the counts made in process over cache lines:
	// a decision counts in the stripe of the CPU it runs on (cpuStripe),
	// so threads running at once never write the same line.
	counterStripes = 64
	counterWords   = 4
	// recordGuard is room past the record area's end, so that reading a
	// key of any length a record's bytes claim stays inside the mapping.
	recordGuard = 128 << 10
	// maxRecordsSize keeps references, in 8-byte units, within 32 bits.
	maxRecordsSize = 1<<35 - recordGuard - chunkSize

	// MaxTagsLimit is the most tags a table may be configured for.
	MaxTagsLimit = 100000000

	hdrMagic          = 0
	hdrVersion        = 8
	hdrShards         = 12
	hdrShift          = 16
	hdrMaxKey         = 20
	hdrSeed           = 24
	hdrROSize         = 32
	hdrRWSize         = 40
	hdrPolicyActive   = 48
	hdrPolicySeq      = 56
	hdrState          = 60
	hdrHeartbeat      = 64
	hdrShardTable     = 72
	hdrRecordsOff     = 80
	hdrRecordsSize    = 88
	hdrDirtyOff       = 96
	hdrCountersOff    = 104
	hdrCountedPolicys = 112
	hdrGeneration     = 120
	hdrQuotaOff       = 128 // the quota block: MaxQuotas entries of quotaEntrySize bytes (quota_shared.go)
	hdrQuotaCount     = 136

	// Table states.
	stateLive    = 1
	stateRetired = 2
	stateAsking  = 3
)

var tableMagic = [8]byte{'D', 'T', 'H', 'T', 'B', 'L', 0, 1}

// deadTat marks a record being freed: a caller that reads it asks the
// daemon instead.
const deadTat = math.MinInt64

func pageUp(n uint64) uint64 { return (n + 4095) &^ 4095 }

// regionTags is how many tags a table made for maxTags is laid out for:
// room for reloads to raise max_tags fourfold without a restart.
func regionTags(maxTags int) int { return min(max(4*maxTags, 1<<16), MaxTagsLimit) }

// maxSlots is the most index slots a shard of capacity c grows to.
func maxSlots(c int) int { return int(float64(c+2)/growLoad) + 2*minSlots }

// newRegion lays out a region for shards shards and maxTags tags, in
// memfds when shared.
func newRegion(shared bool, shards, maxTags, maxKey int, seed uint64) (*region, error) {
	tags := regionTags(maxTags)
	r := &region{}
	// Table file: header, shard entries, two policy blocks, two index
	// areas per shard.
	roSize := uint64(headerSize + maxShards*shardEntrySize)
	r.policyBlocks = [2]uint64{roSize, roSize + policyBlockMax}
	roSize += 2 * policyBlockMax
	quotaOff := roSize
	roSize += MaxQuotas * quotaEntrySize
	indexOff := make([][2]uint64, shards)
	slotsPer := make([]int, shards)
	for i := range shards {
		slotsPer[i] = maxSlots(shardCapacity(tags, shards, i))
		for k := range 2 {
			indexOff[i][k] = roSize
			roSize = pageUp(roSize + uint64(slotsPer[i])*8)
		}
	}
	// State file: a page, the counters, the dirty bitmap, the records.
	recordsSize := min(uint64(tags)*128, maxRecordsSize)
	recordsSize = (recordsSize + chunkSize - 1) &^ (chunkSize - 1)
	countersOff := uint64(headerSize)
	dirtyOff := pageUp(countersOff + uint64(counterStripes*countedPolicies*counterWords*8))
	recordsOff := pageUp(dirtyOff + recordsSize/64)
	rwSize := pageUp(recordsOff + recordsSize + recordGuard)

	var err error
	if shared {
		r.ro, r.roFile, err = memfd("dthrottle-table", roSize)
		if err == nil {
			r.rw, r.rwFile, err = memfd("dthrottle-state", rwSize)
		}
	} else {
		r.ro, err = anon(roSize)
		if err == nil {
			r.rw, err = anon(rwSize)
		}
	}
	if err != nil {
		r.unmap()
		return nil, err
	}
	r.records = r.rw[recordsOff : recordsOff+recordsSize+recordGuard]
	r.dirty = words(r.rw[dirtyOff : dirtyOff+recordsSize/64])
	r.counts = words(r.rw[countersOff:dirtyOff])
	r.next.Store(chunkSize) // unit 0 is never a record
	r.indexAreas = make([][2][]uint64, shards)
	for i := range shards {
		for k := range 2 {
			o := indexOff[i][k]
			r.indexAreas[i][k] = words(r.ro[o : o+uint64(slotsPer[i])*8])
		}
	}

	h := r.ro[:headerSize]
	le := binary.LittleEndian
	copy(h[hdrMagic:], tableMagic[:])
	le.PutUint32(h[hdrVersion:], 1)
	le.PutUint32(h[hdrShards:], uint32(shards))
	le.PutUint32(h[hdrShift:], uint32(64-bitsLen(shards)))
	le.PutUint32(h[hdrMaxKey:], uint32(maxKey))
	le.PutUint64(h[hdrSeed:], seed)
	le.PutUint64(h[hdrROSize:], roSize)
	le.PutUint64(h[hdrRWSize:], rwSize)
	le.PutUint64(h[hdrShardTable:], headerSize)
	le.PutUint64(h[hdrRecordsOff:], recordsOff)
	le.PutUint64(h[hdrRecordsSize:], recordsSize)
	le.PutUint64(h[hdrDirtyOff:], dirtyOff)
	le.PutUint64(h[hdrCountersOff:], countersOff)
	le.PutUint32(h[hdrCountedPolicys:], countedPolicies)
	le.PutUint64(h[hdrGeneration:], randomUint64())
	le.PutUint64(h[hdrQuotaOff:], quotaOff)
	le.PutUint32(h[hdrQuotaCount:], MaxQuotas)
	r.quotas = r.ro[quotaOff : quotaOff+MaxQuotas*quotaEntrySize]
	r.setState(stateLive)
	if shared {
		// Only now: the daemon's own mapping stays writable, every later
		// one of the table file is read-only.
		if err := seal(r.roFile, unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
			r.unmap()
			return nil, err
		}
		if err := seal(r.rwFile, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
			r.unmap()
			return nil, err
		}
	}
	return r, nil
}

// bitsLen is log2 of a power of two.
func bitsLen(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

func randomUint64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func memfd(name string, size uint64) ([]byte, *os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("bucket: shared table: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("bucket: shared table: ftruncate: %w", err)
	}
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("bucket: shared table: mmap: %w", err)
	}
	return b, f, nil
}

func anon(size uint64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("bucket: table memory: mmap: %w", err)
	}
	return b, nil
}

func seal(f *os.File, seals int) error {
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("bucket: shared table: seal: %w", err)
	}
	return nil
}

// words views b, 8-byte aligned, as uint64s.
func words(b []byte) []uint64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// unmap releases the region's memory and files.
func (r *region) unmap() {
	if r.ro != nil {
		unix.Munmap(r.ro)
	}
	if r.rw != nil {
		unix.Munmap(r.rw)
	}
	if r.roFile != nil {
		r.roFile.Close()
	}
	if r.rwFile != nil {
		r.rwFile.Close()
	}
}

// releaseWith unmaps r once t is unreachable.
func (r *region) releaseWith(t *Table) {
	runtime.AddCleanup(t, func(r *region) { r.unmap() }, r)
}

func (r *region) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.ro[off])) }
func (r *region) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.ro[off])) }

func (r *region) setState(s uint32) { atomic.StoreUint32(r.u32(hdrState), s) }

// shardWord is shard i's index word in the table file.
func (r *region) shardWord(i int) *uint64 { return r.u64(headerSize + i*shardEntrySize) }

// publishIndex makes slots, which lie in the table file, shard i's index.
func (r *region) publishIndex(i int, slots []uint64) {
	off := uintptr(unsafe.Pointer(&slots[0])) - uintptr(unsafe.Pointer(&r.ro[0]))
	atomic.StoreUint64(r.shardWord(i), uint64(off/8)<<32|uint64(len(slots)))
}

// counter returns stripe si's counters of policy pi: ok, no, dry.
func (r *region) counter(si, pi int) []uint64 {
	o := (si*countedPolicies + pi) * counterWords
	return r.counts[o : o+3 : o+3]
}

// allocChunk takes size bytes (a multiple of chunkSize) of the record
// area and returns the reference of their first unit, or 0 when the area
// is full.
func (r *region) allocChunk(size int) uint32 {
	end := r.next.Add(uint64(size))
	if end > uint64(len(r.records)-recordGuard) {
		return 0
	}
	return uint32((end - uint64(size)) / 8)
}

// markDirty sets the dirty bit of the record ref.
func (r *region) markDirty(ref uint32) {
	atomic.OrUint64(&r.dirty[ref>>6], 1<<(ref&63))
}
