package daemon

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// segCase is TestSegmentsOnFakeTime's policy, tests/faults' TestSegments':
// rate 20/s and burst 10, as the fault tests'.
var segCase = fakeRepairCase{name: "segments", rate: faultRate, burst: faultBurst}

// TestSegmentsOnFakeTime is tests/faults' TestSegments on fake time: two
// segments of three daemons joined by relays (repair_fake_test.go's
// segmentsCluster: two relays a segment, the third node reporting
// through them, the relays' link a network of its own), one tag hammered
// on all six in turn at 400 queries a second. With 10% loss on the link
// the cluster is held to the relay bound and to one rate; with the link
// cut, each segment holds its own rate and says so; healed, the segments
// share one rate again. It logs two "figures:" lines for docs/relays.md.
func TestSegmentsOnFakeTime(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { fakeSegments(t, seed) })
		})
	}
}

// fakeSegments runs TestSegmentsOnFakeTime over the networks of seed.
func fakeSegments(t *testing.T, seed int64) {
	cl, nets := segmentsCluster(t, segCase, seed)
	link := nets[2]
	relaysOf := []*fakeNode{cl[0], cl[1], cl[3], cl[4]}

	// The peers view marks the relays: its segment's other one, and the
	// other segment's two.
	kinds := map[string]int{}
	for _, p := range cl[0].peers() {
		kinds[p.Relay]++
	}
	if kinds[peer.RelayOfSegment] != 1 || kinds[peer.RelayOfRemote] != 2 {
		t.Errorf("a1's peers view shows relays %v, want 1 of its segment and 2 remote", kinds)
	}

	// One limit across both segments, with loss on the link.
	link.SetConfig(transport.MemConfig{Loss: 0.1, Delay: fakeDelay, Jitter: fakeJitter})
	l := runLoad(t, cl, "cross", 8*time.Second, faultLoad, nil)
	// The last hits reach every node, or are asked for until counted
	// lost (a crossing only after peer.MaxAsks asks).
	time.Sleep(4 * fakeInterval)
	awaitAsked(t, cl)
	// Crossings lost on the link are asked for again (docs/design.md,
	// "Lost reports are repaired"): repaired, or counted lost.
	var lostCrossings, repaired uint64
	for _, n := range cl {
		st := n.gossip.node.Stats()
		lostCrossings += st.Relay.CrossingsLost
		repaired += st.Repair.Repaired
	}
	if lostCrossings+repaired == 0 {
		t.Error("no crossing repaired or counted lost: was the link lossy at all?")
	}
	// A lost crossing carries at most what its segment served in one
	// interval, and each relay receiving it misses it.
	perInterval := max(l.mostIn(fakeInterval, 0, 1, 2), l.mostIn(fakeInterval, 3, 4, 5))
	lost := int(lostCrossings) * perInterval
	limit := checkFakeRelayBound(t, l, len(cl), lost)
	steady := l.servedIn(l.start.Add(3*time.Second), l.end.Add(time.Nanosecond))
	window := l.end.Sub(l.start.Add(3 * time.Second)).Seconds()
	// The real test allows 1.5 times the rate; this one 1.2.
	if rate := float64(steady) / window; rate > 1.2*segCase.rate {
		t.Errorf("served %.1f/s after the first 3s, want about the one rate %g/s (two segments alone would serve %g/s)", rate, segCase.rate, 2*segCase.rate)
	}
	fakeFigures(t, l, limit, fmt.Sprintf("10%% loss on the link: %d datagrams repaired, %d crossings lost (up to %d hits); %.1f/s after the first 3s", repaired, lostCrossings, lost, float64(steady)/window), cl.counters())
	link.SetConfig(transport.MemConfig{Delay: fakeDelay, Jitter: fakeJitter})

	// Cut the link: each segment keeps its own rate, and says so. Real
	// daemons are given 10 s to find it; here, the silence timeout and
	// two intervals.
	link.Partition([]string{"a1", "a2"}, []string{"b1", "b2"})
	found := awaitFake(t, fakeSilence+2*fakeInterval, "the relays to find the link cut", func() bool { return remoteRelays(relaysOf, 0) })
	for _, n := range relaysOf {
		if lines := n.logs.Lines("relay of another segment went silent"); len(lines) != 2 {
			t.Errorf("relay %s did not log both of the other segment's relays as silent:\n%s", n.name, strings.Join(lines, "\n"))
		}
		if k := n.gossip.node.Stats().Relay.RemoteSilences; k != 2 {
			t.Errorf("relay %s counted %d remote silences, want 2", n.name, k)
		}
	}
	cut := runLoad(t, cl, "cut", 4*time.Second, faultLoad, nil)
	sideLimit := fakeRelayBound(3, 1, segCase, faultDelay, cut.duration())
	var sides []string
	for i, side := range [][]int{{0, 1, 2}, {3, 4, 5}} {
		n := cut.served(side...)
		if float64(n) > sideLimit || float64(n) < segCase.rate*cut.duration().Seconds()/2 {
			t.Errorf("segment %d served %d while cut off for %v: want at most the bound %.0f for its three nodes, and about r*T (%.0f)",
				i+1, n, cut.duration(), sideLimit, segCase.rate*cut.duration().Seconds())
		}
		sides = append(sides, fmt.Sprintf("%d (%.1f/s)", n, float64(n)/cut.duration().Seconds()))
	}

	// Heal: the relays hear each other again, and one rate holds.
	link.Partition()
	back := awaitFake(t, 2*fakeInterval, "the relays to hear across again", func() bool { return remoteRelays(relaysOf, 2) })
	for _, n := range relaysOf {
		if len(n.logs.Lines("relay of another segment heard", "again=true")) == 0 {
			t.Errorf("relay %s did not log the other segment's return", n.name)
		}
	}
	healed := runLoad(t, cl, "healed", 4*time.Second, faultLoad, nil)
	healedLimit := checkFakeRelayBound(t, healed, len(cl), 0)
	t.Logf("figures: %s: cut for %.1fs (found %v after the cut): the segments served %s against %.0f each; healed (heard across %v after): %d in %.1fs against %.0f",
		t.Name(), cut.duration().Seconds(), found.Round(time.Millisecond), strings.Join(sides, " and "), sideLimit, back.Round(time.Millisecond), healed.served(), healed.duration().Seconds(), healedLimit)
}

// remoteRelays reports whether every one of relays hears n relays of the
// other segment.
func remoteRelays(relays []*fakeNode, n int) bool {
	for _, r := range relays {
		if r.gossip.node.Stats().Relay.RemoteRelays != n {
			return false
		}
	}
	return true
}

// awaitAsked waits until no node of c has asked for a datagram again for
// three intervals (tests/faults' awaitRepairs), failing t after 20 s.
func awaitAsked(t *testing.T, c fakeCluster) {
	t.Helper()
	asked, since := c.counters().Asked, time.Now()
	awaitFake(t, 20*time.Second, "the nodes to stop asking for datagrams again", func() bool {
		if n := c.counters().Asked; n != asked {
			asked, since = n, time.Now()
		}
		return time.Since(since) >= 3*fakeInterval
	})
}

// checkFakeRelayBound checks what the load was served, over the whole run
// and in its busiest second, against the relay bound for n nodes in two
// segments, plus lost hits, and returns the whole run's bound.
func checkFakeRelayBound(t *testing.T, l *fakeLoad, n, lost int) float64 {
	t.Helper()
	whole, second := fakeRelayBound(n, 2, segCase, faultDelay, l.duration()), fakeRelayBound(n, 2, segCase, faultDelay, time.Second)
	if s := l.served(); float64(s) > whole+float64(lost) {
		t.Errorf("served %d in %v, over the relay bound %.0f for %d nodes plus %d hits lost", s, l.duration(), whole, n, lost)
	}
	if s := l.most(time.Second); float64(s) > second+float64(lost) {
		t.Errorf("served %d in 1s, over the relay bound %.0f for %d nodes plus %d hits lost", s, second, n, lost)
	}
	return whole
}
