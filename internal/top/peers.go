package top

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// This file owns the peers' side of the Board: the latest report of each
// node, checked before it is kept, and forgotten when it expires.

// peer is a node's latest report and when it arrived.
type peer struct {
	at time.Time
	r  Report
}

// Limits on what a peer's report may hold, whatever it claims.
const (
	// maxCount caps every count a peer reports: more than a node counts
	// in any window (a million a second for twelve days), and small
	// enough that the counts of 2^20 nodes add up without overflowing.
	maxCount = 1 << 40
	// maxPolicyBytes is the longest policy name kept.
	maxPolicyBytes = 1024
)

// AddPeer keeps r as the latest report of node, arrived at now (this
// node's clock), in place of the one before. It is checked first, so that
// nothing a peer sends can make a view wrong beyond its own counts or
// exceed the Board's memory: lists of an unknown count, of no policy or a
// policy named too long are dropped, and so are a policy's lists after
// its first by one count; tags that are empty or listed twice are
// dropped (the higher count kept); counts are capped at 2^40 and errors
// at their counts; at most 2 × Policies lists and PeerTags tags are
// kept, the lists of the highest totals first, and a list cut short or
// dropped raises its floor or LeftOut. Past Nodes peers, the one heard
// from longest ago is forgotten. AddPeer does not retain r's slices.
func (b *Board) AddPeer(node uint64, now time.Time, r Report) {
	clean := b.sanitize(r)
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.peers[node]; p != nil {
		p.at, p.r = now, clean
		return
	}
	b.expire(now)
	if b.cfg.Nodes == 0 {
		return
	}
	if len(b.peers) >= b.cfg.Nodes {
		var oldest uint64
		first := true
		for id, p := range b.peers {
			if first || p.at.Before(b.peers[oldest].at) {
				oldest, first = id, false
			}
		}
		delete(b.peers, oldest)
	}
	b.peers[node] = &peer{at: now, r: clean}
}

// expire forgets the peers whose report expired at now. The caller holds
// b.mu.
func (b *Board) expire(now time.Time) {
	for id, p := range b.peers {
		if !b.fresh(p, now) {
			delete(b.peers, id)
		}
	}
}

// fresh reports whether p's report still counts at now.
func (b *Board) fresh(p *peer, now time.Time) bool { return now.Sub(p.at) <= b.cfg.Expire }

// sanitize returns what AddPeer keeps of r, sharing nothing with it.
func (b *Board) sanitize(r Report) Report {
	var out Report
	for by := range out.LeftOut {
		out.LeftOut[by] = min(r.LeftOut[by], maxCount)
	}
	type key struct {
		policy string
		by     By
	}
	seen := map[key]bool{}
	lists := make([]List, 0, min(len(r.Lists), 2*b.cfg.Policies))
	for _, l := range r.Lists {
		k := key{l.Policy, l.By}
		if l.Policy == "" || len(l.Policy) > maxPolicyBytes || l.By >= numBy || seen[k] {
			continue
		}
		seen[k] = true
		lists = append(lists, List{Policy: l.Policy, By: l.By, Summary: cleanSummary(l.Summary)})
	}
	slices.SortStableFunc(lists, func(a, b List) int { return cmp.Compare(b.Total, a.Total) })
	tags := b.cfg.PeerTags
	for i, l := range lists {
		if i >= 2*b.cfg.Policies {
			// Every tag of a list left out counted at most its highest
			// count or its floor.
			out.LeftOut[l.By] = max(out.LeftOut[l.By], l.Summary.Cut(0).Floor)
			continue
		}
		l.Summary = l.Summary.Cut(min(tags, b.cfg.K))
		tags -= len(l.Items)
		out.Lists = append(out.Lists, l)
	}
	return out
}

// cleanSummary returns s's items without empty keys or keys listed twice
// (the higher count kept), heaviest first, each count at most maxCount
// and each error at most its count; and s's total and floor, capped.
func cleanSummary(s topk.Summary) topk.Summary {
	items := make([]topk.Item, 0, len(s.Items))
	for _, it := range s.Items {
		if it.Key == "" {
			continue
		}
		it.Count = min(it.Count, maxCount)
		it.Err = min(it.Err, it.Count)
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b topk.Item) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	dup := make(map[string]bool, len(items))
	kept := items[:0]
	for _, it := range items {
		if !dup[it.Key] {
			dup[it.Key] = true
			kept = append(kept, it)
		}
	}
	return topk.Summary{Items: kept, Total: min(s.Total, maxCount), Floor: min(s.Floor, maxCount)}
}
