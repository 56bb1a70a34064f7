package gossip

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// Values the tests give a node when they set none: those of dthrottled's
// [gossip] section as the tests run it.
const (
	testInterval    = time.Second
	testMaxPacket   = 1400
	testForgetAfter = time.Minute
)

// newNode is NewNode with testInterval, testMaxPacket and testForgetAfter
// where cfg leaves them zero.
func newNode(cfg Config, t transport.Transport) (*Node, error) {
	if cfg.Interval == 0 {
		cfg.Interval = testInterval
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = testMaxPacket
	}
	if cfg.ForgetAfter == 0 {
		cfg.ForgetAfter = testForgetAfter
	}
	return NewNode(cfg, t)
}
