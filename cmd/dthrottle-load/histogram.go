package main

import (
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets: 16 sub-buckets per
// power of two of nanoseconds, so a quantile is within about 6% of the
// truth. The zero value is empty and ready; it holds no pointers.
type histogram struct {
	counts [64 * subBuckets]uint64
	n      uint64
}

const subBits = 4
const subBuckets = 1 << subBits

func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	e := bits.Len64(ns) - 1 - subBits // ns >> e lies in [16, 32)
	return (e+1)*subBuckets + int(ns>>e) - subBuckets
}

// lowest returns the smallest duration that falls in bucket b.
func lowest(b int) uint64 {
	if b < subBuckets {
		return uint64(b)
	}
	e := b/subBuckets - 1
	return uint64(b%subBuckets+subBuckets) << e
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the duration below which a fraction q of the samples
// fall (the middle of its bucket), or 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen > rank {
			return time.Duration((lowest(b) + lowest(b+1)) / 2)
		}
	}
	return 0
}
