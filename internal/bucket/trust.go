package bucket

import "encoding/binary"

// This file owns what the daemon believes of a record's key when it
// reads the key back from the state file, which every process deciding
// from the shared table may write (docs/shared-table.md, "What a caller
// can and cannot do"). A record's key is the shard's only when its length
// fits in the record the arena made for it (where the record's chunk is
// not at hand, in the largest record the shard made) and its bytes hash
// to a slot of the shard's index that names the record: the index lies
// in the table file, which only the daemon writes. Whatever reads keys back
// (the drain for the peers and the who-is-throttled board, the refusal
// harvest, the export of levels, a reload) checks them so (ownKey; the
// drain batches the check, drain.go; ownKeyAt where the slot is known),
// and skips a key a caller overwrote rather than report, count or keep
// it: what those keep or send is at most the keys the daemon itself
// inserted, each no longer than the longest key it keeps
// (MaxKeyBytes(max_tag_bytes)), however long the lengths a caller wrote.
//
// A check costs a hash of the key and a probe of the index (about two
// slots), paid once per record taken back, never on a decision. A lookup
// that finds a record of its key's fragment holding garbage gives the
// key back to it (rekey), at a hash of the garbage.

// keyLenBytes is the most bytes a key length the arena writes takes: the
// longest key, maxKeyLen, needs 3 bytes of uvarint.
const keyLenBytes = 3

// keyIn returns the key record r holds when its length fits within size
// bytes from the record's start (the size of its chunk's records, or of
// the largest record), or nil. It reads nothing past them.
func (r record) keyIn(size uint32) []byte {
	n, w := binary.Uvarint(r[recKey : recKey+keyLenBytes])
	if w <= 0 || n > uint64(size) || recKey+w+int(n) > int(size) {
		return nil
	}
	return r[recKey+w : recKey+w+int(n)]
}

// ownKey appends to dst the key of record ref, whose chunk's records are
// size bytes, and returns dst, the key's hash and true; or dst unchanged
// and false when the record holds no key the shard's index holds it
// under (a length past the record, or bytes that do not hash to a slot
// naming the record on their probe sequence). The appended bytes are
// what is checked, so a caller writing the record meanwhile cannot slip
// other bytes past the check. The caller holds the shard's lock.
func (s *shard) ownKey(dst []byte, ref, size uint32) ([]byte, uint64, bool) {
	n := len(dst)
	dst, h, ok := s.copyKey(dst, ref, size)
	if !ok || !s.index.holds(h, ref) {
		return dst[:n], 0, false
	}
	return dst, h, true
}

// ownKeyAt is ownKey for the record of index entry e, whose slot is
// known: its key must hash to e's fragment. The record's chunk is not at
// hand: the largest record the shard made bounds the key's length.
func (s *shard) ownKeyAt(dst []byte, e uint64) ([]byte, bool) {
	n := len(dst)
	dst, h, ok := s.copyKey(dst, uint32(e), s.arena.largest)
	if !ok || uint32(h) != uint32(e>>32) {
		return dst[:n], false
	}
	return dst, true
}

// copyKey appends to dst the key record ref holds when it fits in the
// record's size bytes, and returns dst, the hash of the bytes appended
// and true; or dst unchanged and false.
func (s *shard) copyKey(dst []byte, ref, size uint32) ([]byte, uint64, bool) {
	key := s.arena.rec(ref).keyIn(size)
	if len(key) == 0 {
		return dst, 0, false
	}
	n := len(dst)
	dst = append(dst, key...)
	return dst, Hash(s.seed, dst[n:]), true
}

// holds reports whether a key hashing to h finds record ref in the index:
// an entry of h's fragment naming ref lies on h's probe sequence before
// an empty slot.
func (x *index) holds(h uint64, ref uint32) bool {
	want := uint64(uint32(h))<<32 | uint64(ref)
	slots := x.slots
	i := home(uint32(h), len(slots))
	for range slots {
		switch slots[i] {
		case want:
			return true
		case 0:
			return false
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
	return false
}

// garbled reports whether record ref, which lies in a slot of key's
// fragment frag, holds no key of that fragment (a caller overwrote it)
// and is of the size class of key's record: a record lookup may give key
// back (rekey) when its probe finds no record of its own, so that a tag
// whose record a caller garbled finds its record again, with whatever
// else the caller wrote into it, rather than taking a new one while the
// garbled one waits to be evicted. A record whose key hashes to frag is
// another tag's and is left alone: two tags of one fragment whose records
// were both garbled each take one of the two back, whichever.
func (a *arena) garbled(ref, frag uint32, key []byte) bool {
	c := a.chunkOf(ref)
	if _, size := sizeClass(recordSize(len(key))); uint32(size) != c.size {
		return false
	}
	k := a.rec(ref).keyIn(c.size)
	return len(k) == 0 || uint32(Hash(a.seed, k)) != frag
}

// rekey writes key back into record ref, which garbled found garbled.
func (a *arena) rekey(ref uint32, key []byte) {
	r := a.rec(ref)
	n := binary.PutUvarint(r[recKey:], uint64(len(key)))
	copy(r[recKey+n:], key)
}
