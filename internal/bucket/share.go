package bucket

import (
	"fmt"
	"math"
)

// This file owns a policy's share: the part of its rate and burst a node
// holds while its cluster is split (the "share" partition policy,
// docs/design.md, "The cluster bound"). The table applies it when it
// compiles a policy, so every decision, in the daemon and in the
// processes deciding from the shared table, is made at the scaled rate;
// the fingerprint peers compare hashes the whole one.

// scale returns p with its Rate and Burst scaled by p.Share: the rate by
// the share, the burst by the share rounded up and at least 1, so that
// the parts of a split cluster hold about one burst between them and a
// part never refuses what a single token would serve. A Share of 0 or 1
// leaves p whole.
func scale(p Policy) (Policy, error) {
	if p.Share == 0 || p.Share == 1 {
		return p, nil
	}
	if !(p.Share > 0 && p.Share < 1) {
		return p, fmt.Errorf("bucket: policy %q: share must be in (0, 1], got %v", p.Name, p.Share)
	}
	p.Rate *= p.Share
	p.Burst = max(1, int(math.Ceil(float64(p.Burst)*p.Share-1e-9)))
	return p, nil
}
