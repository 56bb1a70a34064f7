package harness

import (
	"time"
)

const (
	FaultLoad  = 400                    // queries a second, over all nodes: 20x the rate
	FaultDelay = 100 * time.Millisecond // d of the bound: delivery over the bridge takes well under 1 ms; this allows for scheduling on a busy 2-core machine
)
