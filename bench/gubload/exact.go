package main

import (
	"math"
	"time"
)

// exactServed returns how many of the requests made at offsets times
// (ascending, from the start of the run) one exact leaky bucket serves:
// the bucket of docs/design.md, Semantics, for a single node, full at the
// start, earning rate tokens a second up to burst, serving a request when
// it holds at least one token and taking that token.
//
// It runs as the equivalent virtual-scheduling form (GCRA) in whole
// nanoseconds, so that no rounding of a float level decides a request at
// the edge: tat is when the bucket would be full again, each served
// request pushes it one emission interval (1/rate) further, and a
// request at t is served when tat-t is at most (burst-1) intervals, that
// is when the bucket holds at least one token.
func exactServed(times []time.Duration, rate float64, burst int) int {
	if rate <= 0 || burst < 1 {
		return 0
	}
	interval := time.Duration(math.Round(float64(time.Second) / rate))
	tolerance := time.Duration(burst-1) * interval
	var tat time.Duration
	served := 0
	for i, t := range times {
		if i == 0 {
			tat = t
		}
		if tat-t > tolerance {
			continue
		}
		tat = max(tat, t) + interval
		served++
	}
	return served
}

// exactBound is the most one exact bucket can serve over a window of
// length d, whatever the load: its burst and what it earns meanwhile.
func exactBound(d time.Duration, rate float64, burst int) float64 {
	return float64(burst) + rate*d.Seconds()
}
