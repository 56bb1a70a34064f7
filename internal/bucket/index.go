package bucket

import (
	"sync/atomic"
	"unsafe"
)

// index maps keys to record references by open addressing with linear
// probing. Each slot holds the low 32 bits of the key's hash (its
// fragment) above the record reference; 0 is an empty slot. The home slot
// of a fragment f in n slots is f*n>>32, so any number of slots works and
// growth need not double. Deleting shifts the following entries back
// instead of leaving tombstones, so lookups never slow down with churn.
// The slots lie in the table file (region.go), where processes deciding
// in process read them: each of the shard's two index areas holds the
// slots in turn, a growth writing the other one and publishing it in the
// shard's entry (docs/shared-table.md).
//
// Only the shard's lock holder reads slots and count, and changes them;
// but prefetch and prefetchRecord, called without the lock, and every
// process deciding from the shared table read pub or the shard entry and
// then a slot atomically, so the lock holder writes slots atomically
// (except into an array not yet published).
type index struct {
	slots []uint64
	count int
	pub   atomic.Pointer[[]uint64] // slots, for readers without the lock
	reg   *region
	shard int // the shard's number, for its entry in the table file
	area  int // which of the shard's two index areas slots is in
}

// minSlots is the size of a new index.
const minSlots = 8

func (x *index) init(reg *region, shard int) {
	x.reg, x.shard = reg, shard
	x.slots = reg.indexAreas[shard][0][:minSlots]
	clear(x.slots)
	x.publish()
}

func (x *index) publish() {
	s := x.slots
	x.pub.Store(&s)
	x.reg.publishIndex(x.shard, s)
}

func home(frag uint32, n int) int { return int(uint64(frag) * uint64(n) >> 32) }

// lookup returns the slot holding key's reference and the reference, or
// the empty slot where key would go and 0. rec gives a reference's record.
// The first record of key's fragment whose key a caller overwrote
// (arena.garbled) is given key back (arena.rekey) and returned when key
// is nowhere further on.
func (x *index) lookup(a *arena, h uint64, key []byte) (pos int, ref uint32) {
	frag := uint32(h)
	slots := x.slots
	i := home(frag, len(slots))
	stale := -1
	for {
		e := slots[i]
		if e == 0 {
			if stale >= 0 {
				a.rekey(uint32(slots[stale]), key)
				return stale, uint32(slots[stale])
			}
			return i, 0
		}
		if uint32(e>>32) == frag {
			if a.rec(uint32(e)).is(key) {
				return i, uint32(e)
			}
			if stale < 0 && a.garbled(uint32(e), frag, key) {
				stale = i
			}
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// free returns the first empty slot on the probe sequence of a key
// hashing to h: where a key the index does not hold goes.
func (x *index) free(h uint64) int {
	slots := x.slots
	i := home(uint32(h), len(slots))
	for slots[i] != 0 {
		if i++; i == len(slots) {
			i = 0
		}
	}
	return i
}

// slotOf returns the slot holding ref, whose key hashes to h.
func (x *index) slotOf(h uint64, ref uint32) int {
	slots := x.slots
	i := home(uint32(h), len(slots))
	for uint32(slots[i]) != ref {
		if i++; i == len(slots) {
			i = 0
		}
	}
	return i
}

// An index grows when one more entry would fill more than maxLoad of its
// slots, to slots that the entries then fill to growLoad: growth by about
// 1.4x, so that the slots average about 8/0.68 = 12 bytes per entry, and
// a lookup about two probes.
const (
	maxLoad  = 0.8
	growLoad = 0.5625
)

// full reports whether one more entry would load the index past maxLoad.
func (x *index) full() bool { return float64(x.count+1) > maxLoad*float64(len(x.slots)) }

// put stores ref, whose key hashes to h, in the empty slot pos that
// lookup returned.
func (x *index) put(pos int, h uint64, ref uint32) {
	atomic.StoreUint64(&x.slots[pos], uint64(uint32(h))<<32|uint64(ref))
	x.count++
}

// grow makes room for more entries and places every entry again. It
// reports false when the shard's index area has no more room.
func (x *index) grow() bool {
	old := x.slots
	next := x.reg.indexAreas[x.shard][1-x.area]
	n := min(max(int(float64(x.count+1)/growLoad), len(old)+minSlots), len(next))
	if n <= len(old) {
		return false
	}
	x.area = 1 - x.area
	x.slots = next[:n]
	clear(x.slots)
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := home(uint32(e>>32), len(x.slots))
		for x.slots[i] != 0 {
			if i++; i == len(x.slots) {
				i = 0
			}
		}
		x.slots[i] = e
	}
	x.publish()
	return true
}

// delete empties slot pos, shifting back the entries after it that would
// otherwise become unreachable.
func (x *index) delete(pos int) {
	slots := x.slots
	n := len(slots)
	i, j := pos, pos
	for {
		if j++; j == n {
			j = 0
		}
		e := slots[j]
		if e == 0 {
			break
		}
		// e may fill the hole at i unless its home lies cyclically in (i, j].
		h := home(uint32(e>>32), n)
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			atomic.StoreUint64(&slots[i], e)
			i = j
		}
	}
	atomic.StoreUint64(&slots[i], 0)
	x.count--
}

// prefetch starts loading the home slot of a key hashing to h into the
// cache. It may be called without the shard's lock.
func (x *index) prefetch(h uint64) {
	slots := *x.pub.Load()
	prefetch(unsafe.Pointer(&slots[home(uint32(h), len(slots))]))
}
