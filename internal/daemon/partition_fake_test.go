package daemon

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSplitFor is how long TestPartitionShareOnFakeTime keeps its cluster
// split, as tests/faults' TestPartitionShare does.
const fakeSplitFor = 30 * time.Second

// fakeSplitCase is one run of TestPartitionShareOnFakeTime: a policy, by
// multicast or over unicast peers, the tag's limit and its load, and how
// far from the rate the parts may serve together while split.
type fakeSplitCase struct {
	name, policy string
	group        bool
	rate         float64
	burst, load  int
	lo, hi       float64 // the parts together serve lo to hi times the rate
}

// TestPartitionShareOnFakeTime is tests/faults' TestPartitionShare on fake
// time: four daemons, one tag hammered round-robin at 20x its rate (10x
// over unicast peers), the network split 2/2 for 30 s from 3 s into the
// load, then healed for 3 s. Each node counts two peers missing and holds
// half the cluster, and says so in its log; under gossip.partition =
// "share" the two parts together serve within 10% of the rate (the real
// test allows 15%), under "whole" 1.8x to 2.2x it (the real test 1.7x to
// 2.3x). Healed, every node holds the whole rate again. Each run logs a
// "figures:" line for docs/reliability.md.
func TestPartitionShareOnFakeTime(t *testing.T) {
	for _, c := range []fakeSplitCase{
		{"share", "share", true, faultRate, faultBurst, faultLoad, 0.9, 1.1},
		{"whole", "whole", true, faultRate, faultBurst, faultLoad, 1.8, 2.2},
		{"share_unicast", "share", false, 2, 5, 20, 0.9, 1.1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for seed := int64(1); seed <= 2; seed++ {
				t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { fakeSplit(t, c, seed) })
				})
			}
		})
	}
}

// fakeSplit runs one case of TestPartitionShareOnFakeTime.
func fakeSplit(t *testing.T, c fakeSplitCase, seed int64) {
	mem := memNet(seed)
	text := fakeConfig(c.rate, c.burst, fakeInterval, c.group, fmt.Sprintf("partition = %q\n", c.policy))
	cl := faultCluster(t, faultSpecs(4, mem, text))
	share := func(n *fakeNode) float64 { return n.gossip.node.Members().Share }
	for _, n := range cl {
		if s := share(n); s != 1 {
			t.Fatalf("%s: share %v in a whole cluster, want 1", n.name, s)
		}
	}
	every := func(want float64) func() bool {
		return func() bool {
			for _, n := range cl {
				if share(n) != want {
					return false
				}
			}
			return true
		}
	}
	var cut, healed time.Time
	s := newLoadSteps(t)
	s.at(3*time.Second, func() {
		mem.Partition([]string{"n1", "n2"}, []string{"n3", "n4"})
		cut = time.Now()
	})
	// Real daemons are given 10 s for either; here, the silence timeout
	// and two intervals, and two intervals.
	halved := s.await(0, fakeSilence+2*fakeInterval, "every node to hold half the rate", every(0.5))
	s.at(0, func() {
		for _, n := range cl {
			if m := n.gossip.node.Members(); len(m.Missing) != 2 {
				t.Errorf("%s: %d peers missing, want 2", n.name, len(m.Missing))
			}
		}
	})
	s.at(3*time.Second+fakeSplitFor, func() {
		mem.Partition()
		healed = time.Now()
	})
	whole := s.await(0, 2*fakeInterval, "every node to hold the whole rate again", every(1))
	l := runLoad(t, cl, "split", 3*time.Second+fakeSplitFor+3*time.Second, c.load, s.turn)
	s.finish()
	for _, n := range cl {
		if len(n.logs.Lines("peers missing", "missing=2", "share=0.5")) == 0 || len(n.logs.Lines("cluster whole again")) == 0 {
			t.Errorf("%s: the log does not say when peers went missing and when the cluster was whole again", n.name)
		}
	}

	split := healed.Sub(cut)
	want := c.rate * split.Seconds()
	a, b := l.servedIn(cut, healed, 0, 1), l.servedIn(cut, healed, 2, 3)
	ratio := float64(a+b) / want
	if ratio < c.lo || ratio > c.hi {
		t.Errorf("split %.1fs under %s: the parts served %d and %d, together %.2fx the rate's %.0f; want %.2fx to %.2fx", split.Seconds(), c.policy, a, b, ratio, want, c.lo, c.hi)
	}
	after := l.servedIn(healed, l.end.Add(time.Nanosecond))
	rest := l.end.Sub(healed)
	fakeFigures(t, l, want, fmt.Sprintf("split for %.1fs under %s: the parts served %d and %d, together %d (%.2fx the rate's %.0f, over %+d); every node at half %.1fs after the cut, whole %.1fs after healing; healed: %d in %.1fs (%.1f/s)",
		split.Seconds(), c.policy, a, b, a+b, ratio, want, a+b-int(want), halved.Seconds(), whole.Seconds(), after, rest.Seconds(), float64(after)/rest.Seconds()),
		cl.counters())
}
