package daemon

import (
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip"
)

// This file owns the partition policies in the daemon (docs/design.md,
// "The cluster bound"): the gossip node says what share of the cluster
// this node and the peers it hears are (gossip.Members), and the table
// holds the policies under partition "share" at that share of their rate
// and burst. Every change of the table's policies, a reload's or a
// share's, goes through here, so each is made from the other's latest.

// shareState is the table's policies as the config gives them and the
// share they are held at. Its zero value holds the whole rate of no
// config; safe for concurrent use.
type shareState struct {
	mu    sync.Mutex
	cfg   config.Config // the config the table's policies come from
	share float64       // this node's share; 0 means 1
}

// reconfigureTable gives the table cfg's policies at now, those under
// partition "share" held at this node's share.
func (d *Daemon) reconfigureTable(now time.Time, cfg config.Config) error {
	s := &d.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := d.table.Reconfigure(now, shareConfig(cfg, s.share)); err != nil {
		return err
	}
	s.cfg = cfg
	return nil
}

// setShare takes the gossip node's new membership: the policies under
// partition "share" are held at its share from now on. The node calls
// it whenever the membership changes, one call at a time.
func (d *Daemon) setShare(m gossip.Members) {
	s := &d.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	old := max(s.share, 0)
	if old == 0 {
		old = 1
	}
	s.share = m.Share
	if m.Share == old || !s.cfg.Shares() {
		return
	}
	if err := d.table.Reconfigure(d.now(), shareConfig(s.cfg, m.Share)); err != nil {
		d.log.Error("partition: holding the share failed: keeping the policies as they were", "share", m.Share, "err", err)
		return
	}
	d.log.Info("partition: policies under \"share\" hold this node's share of their rate", "share", m.Share,
		"live", m.Live, "missing", len(m.Missing))
}

// share is the share of the rate this node's policies under partition
// "share" hold now: 1 unless peers are missing.
func (d *Daemon) share() float64 {
	d.shares.mu.Lock()
	defer d.shares.mu.Unlock()
	if d.shares.share == 0 || !d.shares.cfg.Shares() {
		return 1
	}
	return d.shares.share
}

// shareConfig is the table's config for cfg with the policies under
// partition "share" held at share (the whole rate at 1). Their
// fingerprint stays the whole policy's.
func shareConfig(cfg config.Config, share float64) bucket.Config {
	tc := tableConfig(cfg)
	if share <= 0 || share >= 1 {
		return tc
	}
	if cfg.PolicyShares(nil) {
		tc.Default.Share = share
	}
	for i := range cfg.Policy {
		if cfg.PolicyShares(&cfg.Policy[i]) {
			tc.Policies[i].Share = share
		}
	}
	return tc
}
