package harness

import (
	"time"
)

const (
	FaultLoad  = 400                    // queries a second, over all nodes: 20x the rate
	FaultDelay = 100 * time.Millisecond // d of the bound: delivery over the bridge takes well under 1 ms; this allows for scheduling on a busy 2-core machine
)

// FaultPolicy is the default policy of the clusters the fault, repair
// and rolling restart tests build.
var FaultPolicy = NodeConfig{Rate: 20, Burst: 10}

// Bound is the cluster bound's most that n nodes with burst b and rate r,
// reporting every LANInterval with delivery delay d, serve a tag over a
// window w: b + r*w + (n-1)*(b + r*(I+d)) (docs/design.md, The cluster
// bound).
func Bound(n int, c NodeConfig, d, w time.Duration) float64 {
	b, r := float64(c.Burst), c.Rate
	return b + r*w.Seconds() + float64(n-1)*(b+r*(LANInterval+d).Seconds())
}
