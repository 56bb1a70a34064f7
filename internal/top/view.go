package top

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// This file owns what the Board hands out: this node's report for its
// peers and the views of the admin endpoint. Both merge summaries taken
// under the lock after releasing it.

// Report returns this node's heaviest tags over the window at now, for
// its peers: for each policy and count with anything in the window, its
// K heaviest tags with their total and floor, the lists of the highest
// totals first. wire's Encoder.EncodeTop fits it into one datagram.
func (b *Board) Report(now time.Time) Report {
	var r Report
	for by := range By(numBy) {
		for policy, s := range b.own(by, "", now) {
			r.Lists = append(r.Lists, List{Policy: policy, By: by, Summary: s})
		}
	}
	slices.SortFunc(r.Lists, func(a, b List) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		if c := strings.Compare(a.Policy, b.Policy); c != 0 {
			return c
		}
		return cmp.Compare(a.By, b.By)
	})
	return r
}

// own returns this node's window at now by one count, per policy (only
// policy, when it is not empty), each summary at most K tags.
func (b *Board) own(by By, policy string, now time.Time) map[string]topk.Summary {
	parts := map[string][]topk.Summary{}
	b.mu.Lock()
	cur := b.current(now)
	for name, tr := range b.tracks {
		if policy != "" && name != policy {
			continue
		}
		if sums := b.window(tr, by, cur); len(sums) > 0 {
			parts[name] = sums
		}
	}
	b.mu.Unlock()
	out := make(map[string]topk.Summary, len(parts))
	for name, sums := range parts {
		out[name] = topk.MergeSummaries(b.cfg.K, sums...)
	}
	return out
}

// View answers GET /v1/top (api.Top) at now: per policy (only
// policy, when it is not empty), its n heaviest tags by refusals (by
// "refused") or served hits (by "served") over the window, counted by
// this node alone (scope "node") or by the whole cluster (scope
// "cluster": this node and every peer whose report has not expired),
// policies of the highest totals first. Empty by and scope are the
// defaults, refused and cluster; n is brought within 1 and K, 20 when
// below 1.
//
// In the cluster, a tag's counts add over the nodes; a node that did not
// list it adds what it may have counted there (its list's floor, or its
// report's LeftOut for a list it left out) to both its count and its
// error, so every count keeps its stated error.
func (b *Board) View(by, scope, policy string, n int, now time.Time) api.Top {
	count := Refused
	if by == Served.String() {
		count = Served
	}
	cluster := scope != "node"
	if n < 1 {
		n = 20
	}
	n = min(n, b.cfg.K)

	own := b.own(count, policy, now)
	var peers []Report
	b.mu.Lock()
	window := b.covered(now, b.current(now))
	if cluster {
		for _, p := range b.peers {
			if b.fresh(p, now) {
				peers = append(peers, p.r) // never changed once kept
			}
		}
	}
	b.mu.Unlock()

	names := map[string]bool{}
	for name := range own {
		names[name] = true
	}
	for _, r := range peers {
		for _, l := range r.Lists {
			if l.By == count && (policy == "" || l.Policy == policy) {
				names[l.Policy] = true
			}
		}
	}
	doc := api.Top{
		By:            count.String(),
		Scope:         "node",
		WindowSeconds: window.Seconds(),
		Nodes:         1,
		Policies:      []api.TopPolicy{},
	}
	if cluster {
		doc.Scope, doc.Nodes = "cluster", 1+len(peers)
	}
	for name := range names {
		sums := []topk.Summary{own[name]}
		for _, r := range peers {
			sums = append(sums, r.list(name, count))
		}
		m := topk.MergeSummaries(n, sums...)
		if m.Total == 0 && len(m.Items) == 0 {
			continue
		}
		tp := api.TopPolicy{Policy: name, Total: m.Total, Bound: m.Floor, Tags: make([]api.TopTag, len(m.Items))}
		for i, it := range m.Items {
			tp.Tags[i] = api.TopTag{Tag: it.Key, Count: it.Count, Error: it.Err}
		}
		doc.Policies = append(doc.Policies, tp)
	}
	slices.SortFunc(doc.Policies, func(a, b api.TopPolicy) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return strings.Compare(a.Policy, b.Policy)
	})
	return doc
}

// list returns r's list of policy by one count, or, when r has none, an
// empty one whose floor is what a tag of a list r left out may have
// counted.
func (r Report) list(policy string, by By) topk.Summary {
	for _, l := range r.Lists {
		if l.By == by && l.Policy == policy {
			return l.Summary
		}
	}
	return topk.Summary{Floor: r.LeftOut[by]}
}
