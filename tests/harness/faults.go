package harness

import (
	"time"
)

// The fault tests hammer one tag on every node of a multi-host cluster
// (multihost_test.go) while something goes wrong between the peers, and
// hold the served count to the cluster bound (docs/design.md, The cluster bound). Each logs a "figures:"
// line (go test -v) for docs/reliability.md's table of faults between peers.

const (
	FaultLoad  = 400                    // queries a second, over all nodes: 20x the rate
	FaultDelay = 100 * time.Millisecond // d of the bound: delivery over the bridge takes well under 1 ms; this allows for scheduling on a busy 2-core machine
)
