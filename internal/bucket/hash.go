package bucket

import (
	"encoding/binary"
	"math/bits"
)

// Hash is the table's hash of a key under a seed: where a key's shard
// and index slot are, for the daemon and for every process that decides
// from the shared table (docs/shared-table.md gives it step by step, and
// libdthrottle implements it bit for bit). It is the multiply-mix
// construction of wyhash: fast for the short keys tags are, and keyed by
// a seed each table draws at random, so that which tags collide cannot be
// known in advance.
func Hash(seed uint64, key []byte) uint64 { return hashMixed(mixSeed(seed), key) }

const (
	hashP0 = 0xa0761d6478bd642f
	hashP1 = 0xe7037ed1a0b428db
	hashP2 = 0x8ebc6af09c88c6e3
)

// mixSeed is Hash's first step, which depends on the seed alone: a
// caller hashing many keys under one seed does it once.
func mixSeed(seed uint64) uint64 { return seed ^ mix(seed^hashP0, hashP1) }

// hashMixed is Hash of key under a seed mixSeed returned.
func hashMixed(seed uint64, key []byte) uint64 {
	const p1, p2 = hashP1, hashP2
	n := len(key)
	var a, b uint64
	switch {
	case n == 0:
	case n < 4:
		a = uint64(key[0])<<16 | uint64(key[n>>1])<<8 | uint64(key[n-1])
	case n <= 16:
		q := (n >> 3) << 2
		a = uint64(r4(key))<<32 | uint64(r4(key[q:]))
		b = uint64(r4(key[n-4:]))<<32 | uint64(r4(key[n-4-q:]))
	default:
		p := key
		for len(p) > 16 {
			seed = mix(r8(p)^p1, r8(p[8:])^seed)
			p = p[16:]
		}
		a, b = r8(key[n-16:]), r8(key[n-8:])
	}
	a ^= p1
	b ^= seed
	hi, lo := bits.Mul64(a, b)
	return mix(lo^p2^uint64(n), hi^p1)
}

// hashString is Hash of a string's bytes.
func hashString(seed uint64, key string) uint64 { return Hash(seed, bytesOf(key)) }

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func r4(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func r8(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
