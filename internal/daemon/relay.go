package daemon

import (
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// This file owns the daemon's side of relaying (package internal/gossip/relay,
// docs/scaling.md): the node's relay settings from [relay] and the
// policies, the link to other segments' relays, and what a reload
// changes of them.

// relayRun is the running relaying: the hold-back a reload changes, and
// on a relay the link to other segments.
type relayRun struct {
	hold    atomic.Pointer[holdSettings]
	link    transport.Transport         // nil but on a relay with a link
	unicast *transport.UnicastTransport // link, when it is a UDP socket
}

type holdSettings struct {
	fraction float64
	interval time.Duration
}

var relayModes = map[string]relay.Mode{
	config.RelayOff:   relay.Off,
	config.RelayUse:   relay.Use,
	config.RelayServe: relay.Serve,
}

// relayConfig returns the node's relay settings for cfg: each tag is held
// back after its policy's burst and refill time (gossip.HoldFor).
func (r *relayRun) relayConfig(cfg config.Config, table *bucket.Table) relay.Config {
	h := &holdSettings{fraction: cfg.Relay.Hold, interval: cfg.Gossip.Interval.Duration}
	r.hold.Store(h)
	var maxAge time.Duration
	for _, p := range table.Policies() {
		if limits(p) {
			_, age := relay.HoldFor(h.fraction, p.Burst, p.Refill(), h.interval)
			maxAge = max(maxAge, age)
		}
	}
	rc := relay.Config{
		Mode: relayModes[cfg.Relay.Mode],
		Hold: func(key string) (uint32, time.Duration) {
			h := r.hold.Load()
			if p := table.PolicyOf(key); limits(p) {
				return relay.HoldFor(h.fraction, p.Burst, p.Refill(), h.interval)
			}
			return 1, h.interval // no bucket to hold for: pass it on
		},
		MaxAge: maxAge,
	}
	if r.link != nil {
		rc.Link = r.link
	}
	return rc
}

// limits reports whether p keeps buckets whose hits relays carry.
func limits(p bucket.Policy) bool {
	return p.Action == bucket.Limit && p.Burst > 0 && p.Rate > 0
}

// openLink opens, on a relay, the socket other segments' relays reach it
// on, sending to those of cfg.Peers. Nothing is learned on it.
func (r *relayRun) openLink(cfg config.Relay, log *slog.Logger) error {
	if cfg.Mode != config.RelayServe {
		return nil
	}
	t, err := transport.ListenUnicast(transport.UnicastConfig{Bind: cfg.Bind, Peers: cfg.Peers, Logger: log})
	if err != nil {
		return fmt.Errorf("relay link %s: %w", cfg.Bind, err)
	}
	r.link, r.unicast = t, t
	log.Info("relay: serving this segment", "link", t.LocalAddr().String(), "other_segments_relays", len(cfg.Peers))
	return nil
}

// useLink takes, on a relay, the link open gives (Options.RelayLink)
// instead of a socket: tests join segments over an in-memory network.
func (r *relayRun) useLink(cfg config.Relay, open func(config.Relay) (transport.Transport, error)) error {
	if cfg.Mode != config.RelayServe {
		return nil
	}
	t, err := open(cfg)
	if err != nil {
		return fmt.Errorf("relay link: %w", err)
	}
	r.link = t
	return nil
}

// reloadRelay applies a reload's relay settings: mode and hold-back, and
// on a relay that started as one, the other segments' relays. Becoming or
// ceasing to be a relay, and a relay's bind, need a restart (their reload
// tags in package config).
func (r *relayRun) reloadRelay(node *gossip.Node, cur, next config.Config, table *bucket.Table) error {
	node.SetRelay(r.relayConfig(next, table))
	if r.unicast != nil && !slices.Equal(cur.Relay.Peers, next.Relay.Peers) {
		return r.unicast.SetPeers(next.Relay.Peers)
	}
	return nil
}
