package daemon

import (
	"errors"
	"fmt"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip"
)

// startAdmin serves the admin endpoint on cfg.HTTP, when set.
func (d *Daemon) startAdmin(cfg config.Admin) error {
	if cfg.HTTP == "" {
		return nil
	}
	srv, err := admin.New(admin.Config{Addr: cfg.HTTP, Logger: d.log, Pprof: cfg.Pprof}, admin.Sources{
		Snapshot:   d.snapshot,
		Peers:      d.peers,
		Tag:        d.tagView,
		Forget:     func(tag string) bool { return d.table.Forget(d.table.Key([]byte(tag))) },
		Top:        d.top.View,
		Collectors: d.collectors(),
	})
	if err != nil {
		return err
	}
	d.admin = srv
	d.log.Info("admin endpoint", "http", srv.Addr().String())
	go func() {
		if err := srv.Serve(); err != nil {
			d.failed <- fmt.Errorf("admin endpoint: %w", err)
		}
	}()
	return nil
}

// snapshot gathers the counters the admin endpoint serves.
func (d *Daemon) snapshot() admin.Snapshot {
	d.mu.Lock()
	reloads, failures := d.reloads, d.reloadFailures
	stateOn := d.cfg.State.File != ""
	d.mu.Unlock()
	s := admin.Snapshot{
		Version:        d.version,
		Started:        d.started,
		Table:          d.table.Stats(),
		Policies:       d.table.PolicyStats(),
		Reloads:        reloads,
		ReloadFailures: failures,
	}
	d.waysStats(&s)
	if stateOn {
		st := d.StateStats()
		s.State = &st
	}
	if d.gossip != nil {
		n := d.gossip.node
		g := &admin.Gossip{Node: n.ID(), Stats: n.Stats(), Members: n.Members()}
		if u := d.gossip.unicast; u != nil {
			g.Discovery = u.DiscoveryStats()
		}
		for _, p := range n.Peers() {
			if !p.Silent {
				g.Peers++
			}
		}
		s.Gossip = g
	}
	return s
}

// peers is the gossip peers view, nil when gossip is off.
func (d *Daemon) peers() []gossip.PeerInfo {
	if d.gossip == nil {
		return nil
	}
	peers := d.gossip.node.Peers()
	for i := range peers {
		peers[i].Found = d.gossip.found(peers[i].Addr)
	}
	return peers
}

// tagView is one tag's state now; an untracked tag is a full bucket of the
// policy it falls under.
func (d *Daemon) tagView(tag string) admin.TagView {
	key := d.table.Key([]byte(tag))
	st, err := d.table.Peek(d.now(), key)
	if err != nil && !errors.Is(err, bucket.ErrUnknownTag) {
		d.log.Warn("admin: reading a tag", "err", err)
	}
	v := admin.TagView{Key: key, Tracked: st.Tracked, Policy: st.Policy.Name, Action: st.Policy.Action.String(),
		Rate: st.Policy.Rate, Burst: st.Policy.Burst, Tokens: st.Tokens, Unreported: uint64(st.Unreported),
		DryRun: st.Policy.DryRun}
	if v.DryRun {
		for _, p := range d.table.PolicyStats() {
			if p.Name == st.Policy.Name {
				v.DryRunRefused = p.DryRunRefused
			}
		}
	}
	return v
}
