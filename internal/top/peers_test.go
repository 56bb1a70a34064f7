package top

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// TestPeerMergedAndAgedOut: a peer's list adds to this node's in the
// cluster view, with what each side may have left out added to the
// error, not in the node view; it ages out once it expires.
func TestPeerMergedAndAgedOut(t *testing.T) {
	b := newBoard(t, nil) // reports expire after 15 s
	b.AddRefused(at(1), []bucket.Refusals{refusals("login", map[string]uint64{"a": 10, "b": 4})})
	b.AddPeer(7, at(2), Report{Lists: []List{{Policy: "login", By: Refused, Summary: topk.Summary{
		Total: 100, Floor: 3, Items: []topk.Item{{Key: "a", Count: 50, Err: 1}, {Key: "c", Count: 30}}}}}})

	v := b.View("refused", "cluster", "", 20, at(5))
	if v.Nodes != 2 || len(v.Policies) != 1 {
		t.Fatalf("cluster view %+v", v)
	}
	p := v.Policies[0]
	// a: 10 here, 50±1 there. b: 4 here, at most the peer's floor 3
	// there. c: 30 there, nothing here (this node's list is exact).
	want := "a=60±1 c=30±0 b=7±3"
	var got []string
	for _, tg := range p.Tags {
		got = append(got, fmt.Sprintf("%s=%d±%d", tg.Tag, tg.Count, tg.Error))
	}
	if strings.Join(got, " ") != want || p.Total != 114 || p.Bound != 3 {
		t.Fatalf("cluster: %v total %d bound %d, want %s, 114, 3", got, p.Total, p.Bound, want)
	}
	if v := b.View("refused", "node", "", 20, at(5)); v.Nodes != 1 || v.Policies[0].Total != 14 {
		t.Fatalf("node view %+v", v)
	}
	// A newer report replaces the one before.
	b.AddPeer(7, at(10), Report{})
	if v := b.View("refused", "cluster", "", 20, at(11)); v.Nodes != 2 || v.Policies[0].Total != 14 {
		t.Fatalf("after an empty report: %+v", v)
	}
	// Expired: 15 s after it arrived, the peer no longer counts.
	b.AddPeer(7, at(12), Report{Lists: []List{{Policy: "login", By: Refused, Summary: topk.Summary{Total: 100}}}})
	if v := b.View("refused", "cluster", "", 20, at(27)); v.Nodes != 2 || v.Policies[0].Total != 114 {
		t.Fatalf("at 27 s: %+v", v)
	}
	if v := b.View("refused", "cluster", "", 20, at(27.1)); v.Nodes != 1 || v.Policies[0].Total != 14 {
		t.Fatalf("at 27.1 s: %+v", v)
	}
}

// TestPeerLeftOut: a peer that left this policy's list out of its report
// may have counted up to its LeftOut of any tag.
func TestPeerLeftOut(t *testing.T) {
	b := newBoard(t, nil)
	b.AddRefused(at(1), []bucket.Refusals{refusals("login", map[string]uint64{"a": 10})})
	b.AddPeer(7, at(1), Report{LeftOut: [2]uint64{6, 0}})
	p := b.View("refused", "cluster", "", 20, at(1)).Policies[0]
	if p.Tags[0].Count != 16 || p.Tags[0].Error != 6 || p.Bound != 6 {
		t.Fatalf("%+v: want a=16±6, bound 6", p)
	}
	if s := b.View("served", "cluster", "", 20, at(1)); len(s.Policies) != 0 {
		t.Fatalf("served: %+v", s.Policies)
	}
}

// TestPeerBadLists: what a peer sends cannot overflow a count, list a tag
// twice, list an empty tag, or grow the board past its limits.
func TestPeerBadLists(t *testing.T) {
	b := newBoard(t, func(c *Config) { c.Policies = 2; c.PeerTags = 10; c.Nodes = 3 })
	huge := topk.Summary{Total: math.MaxUint64, Floor: math.MaxUint64, Items: []topk.Item{
		{Key: "a", Count: math.MaxUint64, Err: math.MaxUint64},
		{Key: "", Count: 500},
		{Key: "b", Count: 2, Err: 9}, // error above the count
		{Key: "a", Count: 3},         // again
		{Key: "c", Count: 7},         // out of order
	}}
	var lists []List
	lists = append(lists, List{Policy: "p", By: Refused, Summary: huge},
		List{Policy: "p", By: Refused, Summary: topk.Summary{Total: 1, Items: []topk.Item{{Key: "z", Count: 1}}}}, // twice
		List{Policy: "", By: Refused, Summary: topk.Summary{Total: 5}},
		List{Policy: strings.Repeat("x", 2000), By: Refused, Summary: topk.Summary{Total: 5}},
		List{Policy: "q", By: 9, Summary: topk.Summary{Total: 5}})
	for i := range 10 { // past 2 × Policies lists and PeerTags tags
		l := List{Policy: fmt.Sprint("many", i), By: Served, Summary: topk.Summary{Total: uint64(100 - i)}}
		for j := range 5 {
			l.Items = append(l.Items, topk.Item{Key: fmt.Sprint("k", j), Count: uint64(50 - j)})
		}
		lists = append(lists, l)
	}
	for node := range uint64(5) { // past Nodes
		b.AddPeer(node+1, at(float64(node)), Report{Lists: lists, LeftOut: [2]uint64{math.MaxUint64, 0}})
	}
	v := b.View("refused", "cluster", "", 20, at(5))
	if v.Nodes != 4 {
		t.Fatalf("%d nodes counted, want this one and the 3 latest", v.Nodes)
	}
	if len(v.Policies) != 1 || v.Policies[0].Policy != "p" {
		t.Fatalf("refused policies %+v, want p alone", v.Policies)
	}
	p := v.Policies[0]
	seen := map[string]bool{}
	for _, tg := range p.Tags {
		if tg.Tag == "" || seen[tg.Tag] || tg.Error > tg.Count || tg.Count > 3*maxCount {
			t.Fatalf("tag %+v in %+v", tg, p.Tags)
		}
		seen[tg.Tag] = true
	}
	if p.Tags[0].Tag != "a" || p.Tags[0].Count != 3*maxCount || p.Total != 3*maxCount {
		t.Fatalf("%+v: want a first at 3 × 2^40, the total capped alike", p)
	}
	b.mu.Lock()
	for id, pe := range b.peers {
		n := 0
		for _, l := range pe.r.Lists {
			n += len(l.Items)
		}
		if len(pe.r.Lists) > 2*b.cfg.Policies || n > b.cfg.PeerTags {
			t.Errorf("peer %d kept %d lists and %d tags", id, len(pe.r.Lists), n)
		}
		if pe.r.LeftOut != [2]uint64{maxCount, 50} {
			t.Errorf("peer %d: LeftOut %v, want capped and raised to the heaviest tag of a list dropped, 50", id, pe.r.LeftOut)
		}
	}
	b.mu.Unlock()
}
