package daemon

import (
	"errors"
	"fmt"

	"github.com/dthrottle/dthrottle/admin"
	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/config"
)

// startAdmin serves the admin endpoint on cfg.HTTP, when set.
func (d *Daemon) startAdmin(cfg config.Admin) error {
	if cfg.HTTP == "" {
		return nil
	}
	srv, err := admin.New(admin.Config{Addr: cfg.HTTP, Logger: d.log, Pprof: cfg.Pprof}, admin.Sources{
		Snapshot: d.snapshot,
		Peers:    d.peers,
		Tag:      d.tagView,
		Forget:   func(tag string) bool { return d.table.Forget(d.table.Key([]byte(tag))) },
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
	ts := d.table.Stats()
	ss := d.server.Stats()
	d.mu.Lock()
	reloads, failures := d.reloads, d.reloadFailures
	d.mu.Unlock()
	s := admin.Snapshot{
		Version:        d.version,
		Started:        d.started,
		Tags:           ts.Tags,
		Evictions:      ts.Evictions,
		EvictedHits:    ts.EvictedHits,
		Connections:    admin.Connections{Active: ss.Active, Accepted: ss.Accepted, Rejected: ss.Rejected},
		Queries:        admin.Queries{Total: ss.Queries, LineTooLong: ss.LineTooLong},
		Reloads:        reloads,
		ReloadFailures: failures,
	}
	for _, p := range d.table.PolicyStats() {
		s.Policies = append(s.Policies, admin.PolicyCounts{Name: p.Name, Action: p.Action.String(), OK: p.OK, NO: p.NO,
			DryRun: p.DryRun, DryRunRefused: p.DryRunRefused})
	}
	if d.http != nil {
		h := d.http.srv.Stats()
		s.HTTP = admin.HTTP{Enabled: true, Allowed: h.Allowed, Refused: h.Refused, Bad: h.Bad,
			Active: h.Active, Accepted: h.Accepted, Rejected: h.Rejected}
	}
	if d.gossip != nil {
		n := d.gossip.node
		gs := n.Stats()
		s.Gossip = admin.Gossip{
			Enabled: true, Node: n.ID(),
			PacketsSent: gs.PacketsSent, BytesSent: gs.BytesSent,
			PacketsReceived: gs.PacketsReceived, BytesReceived: gs.BytesReceived,
			Dropped: admin.Dropped{Auth: gs.DroppedAuth, Malformed: gs.DroppedMalformed,
				Version: gs.DroppedVersion, Duplicate: gs.DroppedDuplicate, Stale: gs.DroppedStale},
			Own: gs.Own, Lost: gs.Lost, FingerprintMismatch: gs.FingerprintMismatch,
			LastReport: gs.LastReport, LastReportDuration: gs.LastReportDuration,
		}
		for _, p := range n.Peers() {
			if !p.Silent {
				s.Gossip.Peers++
			}
		}
	}
	return s
}

// peers is the gossip peers view, nil when gossip is off.
func (d *Daemon) peers() []admin.Peer {
	if d.gossip == nil {
		return nil
	}
	var out []admin.Peer
	for _, p := range d.gossip.node.Peers() {
		out = append(out, admin.Peer{Node: p.Node, Addr: p.Addr, FirstHeard: p.FirstHeard, LastHeard: p.LastHeard,
			Packets: p.Packets, Hits: p.Hits, Lost: p.Lost, Duplicates: p.Duplicates,
			FingerprintMatch: p.FingerprintMatch, Silent: p.Silent})
	}
	return out
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
