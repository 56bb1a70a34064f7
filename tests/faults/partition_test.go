package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// splitRules cuts the gossip between nodes 1-2 and nodes 3-4 on the
// bridge of a four-host LAN (multihost_test.go).
const splitRules = `table bridge partition {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname { "b1", "b2" } oifname { "b3", "b4" } udp dport 7777 drop
		iifname { "b3", "b4" } oifname { "b1", "b2" } udp dport 7777 drop
	}
}`

// TestPartitionShare: four real daemons, each in a namespace of its own
// on the test's bridge, one tag hammered round-robin at 20x its rate;
// nftables splits them 2/2 for 30 s. Each node says it counts two peers
// missing and holds half the cluster. Under gossip.partition = "share" the
// two parts together serve within 15% of the rate; under "whole" they
// serve about twice it. Healed, every node holds the whole rate again.
// Each node's log says when peers went missing and when they were back.
// By multicast at rate 20/s, and over unicast peers at burst 5 and rate
// 2/s, one tag at 10x its rate. The figures are docs/reliability.md's
// (go test -v).
func TestPartitionShare(t *testing.T) {
	t.Parallel() // each in namespaces of its own, mostly waiting
	for _, run := range []struct {
		name, policy string
		unicast      bool
	}{{"share", "share", false}, {"whole", "whole", false}, {"share_unicast", "share", true}} {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			partitionSplit(t, run.policy, run.unicast)
		})
	}
}

// partitionSplit runs TestPartitionShare under one policy, by multicast
// or over unicast peers.
func partitionSplit(t *testing.T, policy string, unicast bool) {
	if !netns.Run(t) {
		return
	}
	const splitFor = 30 * time.Second
	l := harness.NewLAN(t, 4)
	c, perSecond := harness.FaultPolicy, harness.FaultLoad
	if unicast {
		c, perSecond = repairPolicy, 20 // the one tag at 10x its rate
	}
	c.Gossip = fmt.Sprintf("partition = %q\n", policy)
	var ds []*harness.Daemon
	if unicast {
		for _, h := range l.Hosts {
			ds = append(ds, h.StartConfig(t, c, unicastConfig(h, l.Hosts, c)))
		}
		harness.AwaitPeers(t, ds, len(ds)-1)
	} else {
		ds = l.StartAll(t, c)
	}
	share := func(d *harness.Daemon) float64 {
		return harness.Metric(t, harness.Scrape(t, d.AdminAddr(t)), "dthrottle_gossip_share")
	}
	for _, d := range ds {
		if s := share(d); s != 1 {
			t.Fatalf("%s: share %v in a whole cluster, want 1", d.Sock, s)
		}
	}
	ld := harness.StartLoadAt(l.Hosts, "split", 3*time.Second+splitFor+3*time.Second, perSecond)
	harness.At(ld, 3*time.Second)
	harness.NFT(t, splitRules)
	cut := time.Now()
	for _, d := range ds {
		testkit.WaitFor(t, 10*time.Second, d.Sock+" to hold half the rate", func() bool { return share(d) == 0.5 })
	}
	halved := time.Since(cut)
	for _, d := range ds {
		if m := harness.Metric(t, harness.Scrape(t, d.AdminAddr(t)), "dthrottle_gossip_peers_missing"); m != 2 {
			t.Errorf("%s: %v peers missing, want 2", d.Sock, m)
		}
	}
	harness.At(ld, 3*time.Second+splitFor)
	harness.NFT(t, "delete table bridge partition\n")
	healed := time.Now()
	for _, d := range ds {
		testkit.WaitFor(t, 10*time.Second, d.Sock+" to hold the whole rate again", func() bool { return share(d) == 1 })
	}
	whole := time.Since(healed)
	ld.Wait(t, 0)
	for _, d := range ds {
		if len(d.LogLines("peers missing", "missing=2", "share=0.5")) == 0 || len(d.LogLines("cluster whole again")) == 0 {
			t.Errorf("%s: the log does not say when peers went missing and when the cluster was whole again", d.Sock)
		}
	}

	split := healed.Sub(cut)
	want := c.Rate * split.Seconds()
	a, b := ld.ServedIn(cut, healed, ds[:2]...), ld.ServedIn(cut, healed, ds[2:]...)
	ratio := float64(a+b) / want
	// Under share within 15% of the rate; under whole each part the rate.
	lo, hi := 0.85, 1.15
	if policy == "whole" {
		lo, hi = 1.7, 2.3
	}
	if ratio < lo || ratio > hi {
		t.Errorf("split %.1fs under %s: the parts served %d and %d, together %.2fx the rate's %.0f; want %.2fx to %.2fx", split.Seconds(), policy, a, b, ratio, want, lo, hi)
	}
	after := ld.ServedIn(healed, ld.End.Add(time.Nanosecond))
	harness.Figures(t, ld, want, fmt.Sprintf("split for %.1fs under %s: the parts served %d and %d, together %d (%.2fx the rate's %.0f, over %+d); every node at half %.1fs after the cut, whole %.1fs after healing; healed: %d in %.1fs (%.1f/s)",
		split.Seconds(), policy, a, b, a+b, ratio, want, a+b-int(want), halved.Seconds(), whole.Seconds(), after, ld.End.Sub(healed).Seconds(), float64(after)/ld.End.Sub(healed).Seconds()),
		harness.Totals(t, ds...))
}
