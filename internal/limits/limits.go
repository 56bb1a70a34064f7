// Package limits holds the hard limits that the configuration's allowed
// ranges share with the components that hold to them, each written once:
// package config validates a file against them and prints them in the
// reference, and the table, the line protocol, the wire format, the
// gossip node and the rate limit service enforce them. It imports nothing
// of the project, so that config needs no component to know them.
package limits

import (
	"time"
)

const (
	// MinTagBytes is the least max_tag_bytes a table takes: a digest key
	// is the tag's first max_tag_bytes-31 bytes and 32 bytes of SHA-256.
	MinTagBytes = 64
	// MaxLine is the hard cap on a line of the line protocol, in bytes,
	// not counting its '\n': a connection sending a longer line is
	// closed, so no tag is longer, and max_tag_bytes goes no higher.
	MaxLine = 64 << 10
	// MaxPolicies is the most prefix policies a table holds: a record
	// keeps its policy's index, the default's included, in 16 bits, of
	// which indexes from 1<<15 on name limits callers state.
	MaxPolicies = 1<<15 - 2
	// MaxBurst is the largest burst a configuration gives a policy, and
	// so the most tokens one query may cost: a cost above the burst could
	// never be served.
	MaxBurst = 1000000
	// MinPacket and MaxPacket bound a gossip datagram's size: about the
	// smallest datagram every IPv4 host accepts, and the largest UDP
	// payload.
	MinPacket = 512
	MaxPacket = 65507
	// MaxRLSString is the longest domain, entry key or entry value the
	// rate limit service accepts in a request, and so the longest
	// charge key.
	MaxRLSString = 1024
)

// SilentAfter is how long a gossip peer may go unheard before it is
// called silent: three intervals, and at least one second more than one.
func SilentAfter(interval time.Duration) time.Duration {
	return max(3*interval, interval+time.Second)
}
