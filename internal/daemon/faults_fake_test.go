package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	ilimits "github.com/dthrottle/dthrottle/internal/limits"
)

// The fault tests on fake time are what tests/faults' TestFaults ran on
// real daemons in network namespaces, nftables injecting the faults, now
// with whole daemons in one process (faketime_test.go): they hammer one
// tag on every node of a cluster gossiping over an in-memory network
// while something goes wrong between the peers, and hold the served
// count to the cluster bound (docs/design.md, The cluster bound), with
// the network's delay (a millisecond and a half) for d where the real
// test allowed 100 ms. Each logs a "figures:" line (go test -v) for
// docs/reliability.md.

const (
	faultRate  = 20.0 // the fault tests' policy: rate 20/s, burst 10
	faultBurst = 10
	faultLoad  = 400                    // queries a second over all nodes: 20x the rate
	faultDelay = fakeDelay + fakeJitter // d of the bound on memNet's networks
)

// fakeSilence is how long a peer reporting every fakeInterval goes
// unheard before it is silent.
var fakeSilence = ilimits.SilentAfter(fakeInterval)

// faultText is a node's configuration under the fault tests' policy,
// gossiping to a group every fakeInterval, with more after [gossip]'s
// keys.
func faultText(more string) string {
	return fakeConfig(faultRate, faultBurst, fakeInterval, true, more)
}

// faultSpecs are n nodes, "n1" on, of text on mem.
func faultSpecs(n int, mem *transport.MemNetwork, text string) []fakeSpec {
	var specs []fakeSpec
	for i := range n {
		specs = append(specs, fakeSpec{name: fmt.Sprintf("n%d", i+1), text: text, net: mem})
	}
	return specs
}

// faultCluster starts specs and waits two intervals for every node to
// hear every other.
func faultCluster(t *testing.T, specs []fakeSpec) fakeCluster {
	t.Helper()
	cl := startCluster(t, fakeInterval, specs)
	cl.awaitPeers(t, len(cl)-1, 2*fakeInterval)
	return cl
}

// TestFaultsOnFakeTime is tests/faults' TestFaults of old on fake time,
// each fault over seeds of its networks' delays and drops.
func TestFaultsOnFakeTime(t *testing.T) {
	seeded := func(seeds int64, run func(t *testing.T, seed int64)) func(t *testing.T) {
		return func(t *testing.T) {
			t.Parallel()
			for seed := int64(1); seed <= seeds; seed++ {
				t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { run(t, seed) })
				})
			}
		}
	}
	t.Run("loss", seeded(3, fakeFaultLoss))
	t.Run("kill", seeded(2, fakeFaultKill))
	t.Run("partition", seeded(2, fakeFaultPartition))
	t.Run("duplicate_reorder", seeded(1, fakeFaultDuplicateReorder))
	t.Run("forged_replayed", func(t *testing.T) {
		t.Run("secret", seeded(1, func(t *testing.T, seed int64) { fakeFaultForged(t, seed, true) }))
		t.Run("no_secret", seeded(1, func(t *testing.T, seed int64) { fakeFaultForged(t, seed, false) }))
	})
	t.Run("policies", seeded(1, fakeFaultPolicies))
}

// fakeFaultLoss is TestFaults/loss of old: 20% of the datagrams are
// dropped (reports, repair requests and resends alike) once the cluster
// has formed, and until the load's last hits are repaired or lost for
// good. Every node asks for what it misses and has it sent again
// (docs/design.md, "Lost reports are repaired"), so few hits are lost;
// the cluster may serve more than the bound by at most those.
func fakeFaultLoss(t *testing.T, seed int64) {
	mem := memNet(seed)
	cl := faultCluster(t, faultSpecs(4, mem, faultText("")))
	mem.SetConfig(transport.MemConfig{Loss: 0.2, Delay: fakeDelay, Jitter: fakeJitter})
	l := runLoad(t, cl, "loss", 6*time.Second, faultLoad, nil)
	// A gap is noticed within two intervals and asked for from one
	// interval later, once an interval, peer.MaxAsks times.
	time.Sleep((peer.MaxAsks + 4) * fakeInterval)
	mem.SetConfig(transport.MemConfig{Delay: fakeDelay, Jitter: fakeJitter})
	cl.settle(t, l.end, fakeInterval)
	// The node that serves last in a window bounds it; it may have
	// missed at most what the receiver that missed most did.
	worst, sum := cl.missed(t, l)
	limit := checkFaultBound(t, l, len(cl), faultRate, faultBurst, faultDelay, worst)
	for _, n := range cl {
		if c := (fakeCluster{n}).counters(); c.Asked == 0 || c.Repaired == 0 {
			t.Errorf("%s asked for no datagram again, or had none repaired: %v", n.name, c)
		}
	}
	// Without repair each receiver misses about 20% of what the others
	// serve; the real test allows half that, this one a tenth.
	if unrepaired := float64(l.served()*(len(cl)-1)) * 0.2; float64(sum) > unrepaired/10 {
		t.Errorf("%d hits lost over all receivers, want well under the %.0f that 20%% loss takes without repair", sum, unrepaired)
	}
	fakeFigures(t, l, limit, fmt.Sprintf("hits lost %d over all receivers, at most %d at one", sum, worst), cl.counters())
}

// fakeFaultKill is TestFaults/kill of old: a node is killed mid-load,
// as SIGKILL would (no last report, no goodbye), while it holds hits it
// has not reported, and started again. The hits it served since its last
// report die with it: at most one interval's worth, which the others
// never apply. The new daemon is a new node (new id, full buckets): the
// bound is that of one node more, plus those hits.
func fakeFaultKill(t *testing.T, seed int64) {
	mem := memNet(seed)
	cl := faultCluster(t, faultSpecs(4, mem, faultText("")))
	old, oldID := cl[1], cl[1].id()
	survivors := []*fakeNode{cl[0], cl[2], cl[3]}
	var reported, killed time.Time
	var fresh *fakeNode
	s := newLoadSteps(t)
	s.await(2*time.Second, 5*time.Second, "the victim to hold unreported hits", func() bool { return old.tagView("kill").Unreported > 0 })
	s.at(0, func() {
		reported = old.gossip.node.Stats().LastReport
		old.kill()
		killed = time.Now()
		fresh = startFake(t, old.spec)
		cl[1] = fresh // the load's next query to node 2 goes to it
		if fresh.id() == oldID {
			t.Fatalf("the restarted node kept its id %016x", oldID)
		}
	})
	// Real daemons are given 10 s; here, the silence timeout and two
	// intervals.
	heard := s.await(0, fakeSilence+2*fakeInterval, "the survivors to hear the new node, and the killed one silent", func() bool {
		for _, r := range survivors {
			v, ok := peerOf(r, fresh.id())
			gone, listed := peerOf(r, oldID)
			if !ok || v.Silent || !listed || !gone.Silent {
				return false
			}
		}
		return true
	})
	l := runLoad(t, cl, "kill", 6*time.Second, faultLoad, s.turn)
	s.finish()
	cl.settle(t, l.end, fakeInterval)

	// What the killed node served and no survivor ever applied: the
	// same for all, on a lossless network, and no more than it served
	// since its last report.
	servedOld, servedFresh := l.servedIn(l.start, killed, 1), l.servedIn(killed, l.end.Add(time.Nanosecond), 1)
	unreported := -1
	for _, r := range survivors {
		v, _ := peerOf(r, oldID)
		n := servedOld - int(v.Hits)
		if unreported >= 0 && n != unreported {
			t.Errorf("%s missed %d of the killed node's hits, another %d: the network is lossless", r.name, n, unreported)
		}
		unreported = n
	}
	sinceReport := l.servedIn(reported, killed, 1)
	if unreported < 0 || unreported > sinceReport {
		t.Errorf("%d hits of the killed node lost, want between 0 and the %d it served since its last report", unreported, sinceReport)
	}
	// Tighter than the real test: the survivors missed none of the new
	// node's hits either.
	served := func(n *fakeNode) int {
		if n == fresh {
			return servedFresh
		}
		return l.served(slices.Index(cl, n))
	}
	if worst, _ := missedOf(t, survivors, append(slices.Clone(survivors), fresh), served); worst != 0 {
		t.Errorf("survivors missed %d of each other's or the new node's hits on a lossless network", worst)
	}
	// And each logs the new node joining and the killed one falling
	// silent, once.
	for _, r := range survivors {
		joined, silent := r.logs.Lines("peer joined", "node="+peer.Name(fresh.id())), r.logs.Lines("peer went silent", "node="+peer.Name(oldID))
		if len(joined) != 1 || len(silent) != 1 {
			t.Errorf("%s logged the new node joining %d times and the killed one silent %d times, want once each", r.name, len(joined), len(silent))
		}
	}
	limit := checkFaultBound(t, l, len(cl)+1, faultRate, faultBurst, faultDelay, unreported)
	fakeFigures(t, l, limit, fmt.Sprintf("killed at %.1fs, %v after its last report: %d served by it, %d of them never reported (%d served since that report); restarted at once; the survivors heard the new node and the killed one silent %v later",
		killed.Sub(l.start).Seconds(), killed.Sub(reported).Round(time.Millisecond), servedOld, unreported, sinceReport, heard.Round(time.Millisecond)), cl.counters())
}

// hearAcross reports whether every node of c on one side of a split
// (the first half of c, the second) hears every node of the other
// silent, or every one not silent.
func hearAcross(c fakeCluster, silent bool) bool {
	for i, r := range c {
		for j, p := range c {
			if (i < len(c)/2) == (j < len(c)/2) {
				continue
			}
			if v, ok := peerOf(r, p.id()); !ok || v.Silent != silent {
				return false
			}
		}
	}
	return true
}

// fakeFaultPartition is TestFaults/partition of old: the network is cut
// between nodes 1-2 and 3-4 for the first half of the load, then heals.
// Each side holds its own rate meanwhile (the cluster serves about twice
// r); once healed, the datagrams missed are counted lost and the cluster
// is back under the bound of all four.
func fakeFaultPartition(t *testing.T, seed int64) {
	mem := memNet(seed)
	cl := faultCluster(t, faultSpecs(4, mem, faultText("")))
	mem.Partition([]string{"n1", "n2"}, []string{"n3", "n4"})
	var healed time.Time
	s := newLoadSteps(t)
	apart := s.await(0, fakeSilence+2*fakeInterval, "each side to hear the other silent", func() bool { return hearAcross(cl, true) })
	s.at(4*time.Second, func() {
		mem.Partition()
		healed = time.Now()
	})
	whole := s.await(0, 2*fakeInterval, "every node to hear the other side again", func() bool { return hearAcross(cl, false) })
	l := runLoad(t, cl, "split", 8*time.Second, faultLoad, s.turn)
	s.finish()
	cl.settle(t, l.end, fakeInterval)

	split := healed.Sub(l.start)
	sideLimit := clusterBound(2, faultRate, faultBurst, fakeInterval, faultDelay, split)
	var sides []string
	for i, side := range [][]int{{0, 1}, {2, 3}} {
		n := l.servedIn(l.start, healed, side...)
		// Not starved either: it had its own rate, less what a debt
		// carried in could take.
		if float64(n) > sideLimit || float64(n) < faultRate*split.Seconds()/2 {
			t.Errorf("side %d served %d while split for %v: want at most the bound %.0f for two nodes, and about r*T (%.0f)", i+1, n, split, sideLimit, faultRate*split.Seconds())
		}
		sides = append(sides, fmt.Sprintf("%d (%.1f/s)", n, float64(n)/split.Seconds()))
	}
	rest := l.end.Sub(healed)
	after := l.servedIn(healed, l.end.Add(time.Nanosecond))
	afterLimit := clusterBound(len(cl), faultRate, faultBurst, fakeInterval, faultDelay, rest)
	if float64(after) > afterLimit {
		t.Errorf("served %d in the %v after healing, over the bound %.0f for the whole cluster", after, rest, afterLimit)
	}
	c := cl.counters()
	if c.Lost == 0 {
		t.Errorf("no datagram counted lost across the partition: %v", c)
	}
	fakeFigures(t, l, sideLimit*2+afterLimit, fmt.Sprintf("split for %.1fs: the sides heard each other silent %v after the cut and served %s against %.0f each; healed: heard again %v after, %d in %.1fs (%.1f/s) against %.0f",
		split.Seconds(), apart.Round(time.Millisecond), strings.Join(sides, " and "), sideLimit, whole.Round(time.Millisecond), after, rest.Seconds(), float64(after)/rest.Seconds(), afterLimit), c)
}

// fakeFaultDuplicateReorder is TestFaults/duplicate_reorder of old: the
// network delivers every datagram twice, and node 1's reach node 3 only
// through the test, which relays them in swapped pairs. The duplicates
// are dropped and counted; the late datagrams are applied, and no longer
// counted lost once they arrive; every hit is applied once.
func fakeFaultDuplicateReorder(t *testing.T, seed int64) {
	// No jitter: the relay's pairs arrive swapped and nothing else is
	// reordered.
	mem := transport.NewMemNetwork(transport.MemConfig{Duplicate: 1, Delay: fakeDelay, Seed: seed}, nil)
	mem.DeliverOnTime()
	tap := fakeTap{mem.Join("tap")}
	t.Cleanup(func() { tap.Close() })
	swapped := tap.relay("n1")
	specs := faultSpecs(3, mem, faultText(""))
	specs[2].wrap = dropFrom("n1")
	cl := startCluster(t, fakeInterval, specs)
	cl.awaitPeers(t, 2, 3*fakeInterval) // node 3 hears node 1 at its second datagram
	l := runLoad(t, cl, "dup", 5*time.Second, faultLoad, nil)
	cl.settle(t, l.end, fakeInterval)
	if n := swapped.Load(); n < 5 {
		t.Errorf("relay swapped only %d pairs", n)
	}
	if worst, _ := cl.missed(t, l); worst != 0 {
		t.Errorf("a node missed %d hits: late datagrams must be applied, duplicates must not", worst)
	}
	for _, n := range cl {
		if st := n.gossip.node.Stats(); st.DroppedDuplicate == 0 {
			t.Errorf("%s dropped no duplicate", n.name)
		}
	}
	// Tighter than the real test, which waits for node 3 to count
	// nothing lost from node 1: no node counts anything lost.
	c := cl.counters()
	if c.Lost != 0 {
		t.Errorf("datagrams counted lost on a network that loses none (late datagrams arrived): %v", c)
	}
	// The relay holds a datagram until the next: up to an interval more,
	// over two hops.
	limit := checkFaultBound(t, l, len(cl), faultRate, faultBurst, 2*fakeDelay+fakeInterval, 0)
	fakeFigures(t, l, limit, fmt.Sprintf("%d pairs of node 1's datagrams swapped on their way to node 3; every hit applied exactly once on every node", swapped.Load()), c)
}

// fakeFaultForged is TestFaults/forged_replayed of old: the test, a stranger on
// the network, forges reports and replays a real one it captured, to the
// live nodes and to a node restarted since. With a secret, forgeries are
// dropped (auth). Without, they are applied: anyone on the network can
// spend any tag (never grant tokens: reports only subtract), and silence
// a node by sending in its name far ahead in its sequence. Either way a
// replay is never applied twice.
func fakeFaultForged(t *testing.T, seed int64, secret bool) {
	more := "[[policy]]\nname = \"replay\"\nprefix = \"replay:\"\nrate = 0.001\nburst = 100\n"
	var key []byte
	keys := [][]byte{nil} // the forgeries' keys
	if secret {
		key = []byte("the cluster's secret, 32 bytes..")
		keys = append(keys, []byte("not the cluster's secret, 32 b.."))
		path := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(path, key, 0o600); err != nil {
			t.Fatal(err)
		}
		more = fmt.Sprintf("secret_file = %q\n", path) + more
	}
	// No jitter: a warm start's answer comes in datagrams sent at one
	// instant, and a receiver that hears the last one first drops the
	// others; the real test's bridge does not reorder either.
	mem := transport.NewMemNetwork(transport.MemConfig{Delay: fakeDelay, Seed: seed}, nil)
	mem.DeliverOnTime()
	tap := fakeTap{mem.Join("tap")}
	t.Cleanup(func() { tap.Close() })
	cl := faultCluster(t, faultSpecs(3, mem, faultText(more)))
	id1 := cl[0].id()
	stats := func(n *fakeNode) gossip.Stats { return n.gossip.node.Stats() }
	_, m := tap.capture(t, key, func(wire.Message) bool { return true })
	forge := func(node uint64, k []byte, hits []wire.Hit, seq uint64) {
		enc := wire.Encoder{Node: node, Fingerprint: m.Fingerprint, MaxPacket: 1400, Key: k}
		if _, err := enc.Encode(time.Now(), hits, func(pkt []byte) error {
			if seq != 0 { // the header's sequence number: 8 bytes at 13, big-endian
				for i := range 8 {
					pkt[13+i] = byte(seq >> (56 - 8*i))
				}
			}
			tap.send(t, pkt)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	const forger = 0x0bad0bad0bad0bad
	for _, k := range keys {
		forge(forger, k, []wire.Hit{{Key: "victim", Count: 1000}}, 0)
	}
	for _, d := range cl {
		awaitFake(t, 5*time.Second, d.name+" to drop or apply the forgeries", func() bool {
			return stats(d).DroppedAuth >= uint64(len(keys)) || d.tagView("victim").Tokens < 0
		})
		_, listed := peerOf(d, forger)
		if served := d.ask(t, "victim"); served != secret || listed == secret {
			t.Errorf("%s, secret %v: victim served %v, forger in its peers %v", d.name, secret, served, listed)
		}
		// Tighter than the real test: each forgery dropped once, and
		// nothing else.
		if n := stats(d).DroppedAuth; secret && n != uint64(len(keys)) {
			t.Errorf("%s dropped %d datagrams for their MAC, want the %d forgeries", d.name, n, len(keys))
		}
	}

	// A replay of node 1's report of 40 hits, to nodes that applied it.
	for range 40 {
		if !cl[0].ask(t, "replay:x") {
			t.Fatal("node 1 refused replay:x within its burst")
		}
	}
	report, _ := tap.capture(t, key, func(m wire.Message) bool {
		return m.Node == id1 && slices.Contains(m.Hits, wire.Hit{Key: "replay:x", Count: 40})
	})
	applied := func(d *fakeNode, tag string) bool { v := d.tagView(tag); return v.Tracked && v.Tokens < 61 }
	var before []uint64
	for _, d := range cl[1:] {
		awaitFake(t, 5*time.Second, d.name+" to apply node 1's report", func() bool { return applied(d, "replay:x") })
		before = append(before, stats(d).DroppedDuplicate)
	}
	for range 3 {
		tap.send(t, report.Data)
	}
	dropped := uint64(0)
	for i, d := range cl[1:] {
		awaitFake(t, 5*time.Second, d.name+" to drop the replays (or apply one)", func() bool {
			return stats(d).DroppedDuplicate >= before[i]+3 || d.tagView("replay:x").Tokens < 59
		})
		if v := d.tagView("replay:x"); v.Tokens < 59.9 {
			t.Errorf("%s applied a replay: replay:x has %.2f tokens, want 60", d.name, v.Tokens)
		}
		n := stats(d).DroppedDuplicate - before[i]
		if n != 3 { // tighter than the real test: each dropped once
			t.Errorf("%s dropped %d duplicates for 3 replays", d.name, n)
		}
		dropped += n
	}

	// The same replay to node 3 restarted: it never saw that report. It
	// warms from its peers first, adopting their level of replay:x (60
	// tokens); the replay would take 40 more.
	cl[2].stop()
	fresh := startFake(t, cl[2].spec)
	awaitFake(t, 3*fakeInterval, "the restarted node to hear its 2 peers", func() bool { return len(fresh.peers()) == 2 })
	awaitFake(t, 5*time.Second, "the restarted node to adopt replay:x from its peers", func() bool { return applied(fresh, "replay:x") })
	fc := stats(fresh)
	tap.send(t, report.Data)
	replayed := func() bool { return fresh.tagView("replay:x").Tokens < 59 }
	awaitFake(t, 5*time.Second, "the restarted node to drop the replay (or apply it)", func() bool {
		c := stats(fresh)
		return c.DroppedStale+c.DroppedDuplicate > fc.DroppedStale+fc.DroppedDuplicate || replayed()
	})
	if replayed() {
		t.Errorf("the restarted node applied a replayed report it had not seen: %+v", fresh.tagView("replay:x"))
	}
	after := stats(fresh)
	outcome := "all dropped (auth) on every node, victim still served"
	if !secret {
		outcome = "applied on every node, victim refused everywhere"
		// Silencing node 1: one heartbeat in its name, far ahead; then
		// the report of a hit it serves is dropped like the rest.
		forge(id1, nil, nil, 1<<62)
		if !cl[0].ask(t, "replay:y") {
			t.Fatal("node 1 refused replay:y")
		}
		spent := time.Now()
		awaitFake(t, 5*time.Second, "node 1 to report replay:y", func() bool { return stats(cl[0]).LastReport.After(spent) })
		dups := stats(cl[1]).DroppedDuplicate
		awaitFake(t, 5*time.Second, "node 2 to hear node 1 twice more (in order, so the report too)", func() bool {
			return stats(cl[1]).DroppedDuplicate >= dups+2 || cl[1].tagView("replay:y").Tracked
		})
		if cl[1].tagView("replay:y").Tracked {
			t.Error("node 2 applied node 1's report after a forged sequence number: not silenced")
		}
		outcome += "; after one forged heartbeat in node 1's name at sequence 2^62, node 1's real reports are dropped as duplicates"
	}
	t.Logf("figures: %s: forgeries %s; 3 replays to 2 live nodes: %d dropped as duplicates, replay:x still at 60 tokens; 1 replay to a restarted node: dropped as stale %d, as duplicate %d",
		t.Name(), outcome, dropped, after.DroppedStale-fc.DroppedStale, after.DroppedDuplicate-fc.DroppedDuplicate)
}

// fakeFaultPolicies is TestFaults/policies of old: node 3 runs twice the
// rate and burst of the others. Every node counts the mismatching
// datagrams and warns once per such peer. The cluster no longer holds one
// rate: it holds the largest.
func fakeFaultPolicies(t *testing.T, seed int64) {
	mem := memNet(seed)
	specs := faultSpecs(3, mem, faultText(""))
	specs[2].text = fakeConfig(2*faultRate, 2*faultBurst, fakeInterval, true, "")
	cl := faultCluster(t, specs)
	l := runLoad(t, cl, "policies", 3*time.Second, faultLoad, nil)
	for i, d := range cl {
		awaitFake(t, 5*time.Second, d.name+" to count 10 mismatching datagrams", func() bool { return d.gossip.node.Stats().FingerprintMismatch >= 10 })
		warnings := d.logs.Lines("policies differ")
		// Node 3 warns once of each of the others; they of node 3 only.
		var want []*fakeNode
		if i == 2 {
			want = cl[:2]
		} else {
			want = cl[2:]
		}
		ok := len(warnings) == len(want)
		for j := 0; ok && j < len(want); j++ {
			ok = len(d.logs.Lines("policies differ", "node="+peer.Name(want[j].id()))) == 1
		}
		if !ok {
			t.Errorf("%s warned %d times, want once for each of %d peers with other policies:\n%s", d.name, len(warnings), len(want), strings.Join(warnings, "\n"))
		}
	}
	limit := checkFaultBound(t, l, len(cl), 2*faultRate, 2*faultBurst, faultDelay, 0)
	mismatches := uint64(0)
	for _, d := range cl {
		mismatches += d.gossip.node.Stats().FingerprintMismatch
	}
	fakeFigures(t, l, limit, fmt.Sprintf("bound with the largest policy (rate %g, burst %d); %.0f with the others'; %d mismatching datagrams", 2*faultRate, 2*faultBurst,
		clusterBound(len(cl), faultRate, faultBurst, fakeInterval, faultDelay, l.duration()), mismatches), cl.counters())
}
