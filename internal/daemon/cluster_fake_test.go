package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// The cluster tests of tests/cluster (cluster_test.go, multihost_test.go)
// on fake time: whole daemons gossiping over an in-memory network, a tag
// spent on one refused on every other once one report carried it. On
// fake time "once" is exact: by the next report of the node that served
// the hits, at most an interval later, plus the network's delivery,
// where the real daemons are given 5 s. tests/cluster keeps
// TestClusterMulticast and TestClusterUnicast on real sockets, for the
// transports themselves.

const (
	clusterInterval = 200 * time.Millisecond
	clusterBurst    = 1000 // a node polled for a probe tag never runs out of its own tokens first
	// clusterDelay is the longest a datagram of memNet takes.
	clusterDelay = fakeDelay + fakeJitter
)

// clusterText is a node's configuration in the cluster tests: a tag's
// burst of clusterBurst refills a token every 1000 s, and a policy
// (TestMultiHost's) gives the tags under probe: a burst of 5.
func clusterText(group bool, more string) string {
	return fakeConfig(0.001, clusterBurst, clusterInterval, group, more) +
		"[[policy]]\nname = \"probe\"\nprefix = \"probe:\"\nrate = 0.001\nburst = 5\n"
}

// spendAll spends each tag's whole burst on n, then one query more, which
// must be refused.
func spendAll(t *testing.T, n *fakeNode, burst int, tags ...string) {
	t.Helper()
	for _, tag := range tags {
		if got := n.askN(t, tag, burst+1); got != burst {
			t.Fatalf("spending %s on %s: %d of %d served, want its burst of %d", tag, n.name, got, burst+1, burst)
		}
	}
}

// fakeConverged spends, on from, a check tag and then a probe tag for
// each node of others, and returns the check tags. No other node knows of
// them at once (delivery takes fakeDelay at least); every one refuses
// both once from's next report is in, an interval and clusterDelay later
// at the most.
func fakeConverged(t *testing.T, from *fakeNode, others []*fakeNode) []string {
	t.Helper()
	var checks, tags []string
	for _, o := range others {
		check, probe := fmt.Sprintf("check-%s-%s", from.name, o.name), fmt.Sprintf("probe-%s-%s", from.name, o.name)
		checks, tags = append(checks, check), append(tags, check, probe)
	}
	spendAll(t, from, clusterBurst, tags...)
	for _, o := range others {
		for _, tag := range tags {
			if v := o.tagView(tag); v.Tracked {
				t.Fatalf("%s knows of %s the instant %s spent it: %+v", o.name, tag, from.name, v)
			}
		}
	}
	time.Sleep(clusterInterval + clusterDelay)
	for i, o := range others {
		check, probe := tags[2*i], tags[2*i+1]
		if o.ask(t, probe) {
			t.Errorf("%s served %s, spent on %s an interval and a delivery ago", o.name, probe, from.name)
		}
		if o.ask(t, check) {
			t.Errorf("%s served %s, spent on %s before the probe", o.name, check, from.name)
		}
	}
	return checks
}

// TestClusterOnFakeTime is tests/cluster's TestClusterMulticast and
// TestClusterUnicast, and what TestMultiHost checks of the daemons, on
// fake time: three daemons gossiping to a group, or to unicast peers
// (the network is in memory either way: the key says which the daemon
// believes it has). Tags spent on one node are refused on the others
// within an interval and a delivery, from two of the nodes; each node
// hears the other two from their own addresses, with matching policies;
// a policy's tag spent on the first is refused on the others, their
// buckets at its level; and no datagram was lost or heard twice.
func TestClusterOnFakeTime(t *testing.T) {
	for _, group := range []bool{true, false} {
		name := "unicast"
		if group {
			name = "multicast"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mem := memNet(1)
				var specs []fakeSpec
				for i := range 3 {
					specs = append(specs, fakeSpec{name: fmt.Sprintf("n%d", i+1), text: clusterText(group, ""), net: mem})
				}
				c := startCluster(t, clusterInterval, specs)
				c.awaitPeers(t, 2, 2*clusterInterval)
				fakeConverged(t, c[0], c[1:])
				fakeConverged(t, c[2], c[:2])
				fakeConverged(t, c[1], []*fakeNode{c[0], c[2]})

				for i, n := range c {
					for j, o := range c {
						if i == j {
							continue
						}
						p, ok := n.peer(o.id())
						if !ok || p.Addr != o.name || !p.FingerprintMatch || p.Silent {
							t.Errorf("%s's view of %s: %+v (present %v), want it heard from %s, with matching policies", n.name, o.name, p, ok, o.name)
						}
					}
				}

				if got := c[0].askN(t, "probe:x", 6); got != 5 {
					t.Fatalf("spending probe:x on %s: %d of 6 served, want the policy's burst of 5", c[0].name, got)
				}
				time.Sleep(clusterInterval + clusterDelay)
				for _, n := range c[1:] {
					// Five hits on a burst of 5: 0 tokens, and what 0.001/s
					// refilled since.
					if v := n.tagView("probe:x"); !v.Tracked || v.Policy != "probe" || v.Tokens < 0 || v.Tokens > 0.001 {
						t.Errorf("%s's bucket for probe:x: %+v, want the probe policy's, at 0 tokens", n.name, v)
					}
					if n.ask(t, "probe:x") {
						t.Errorf("%s served probe:x, spent on %s", n.name, c[0].name)
					}
				}
				for _, n := range c {
					if st := n.gossip.node.Stats(); st.PacketsReceived == 0 || st.Lost != 0 || st.DroppedDuplicate != 0 {
						t.Errorf("%s's counters: %d datagrams received, %d lost, %d duplicates; want some received, none lost or duplicated",
							n.name, st.PacketsReceived, st.Lost, st.DroppedDuplicate)
					}
				}
			})
		})
	}
}

// TestClusterWrongSecretOnFakeTime is tests/cluster's
// TestClusterWrongSecret on fake time: two daemons share a secret, a
// third signs with another. The two converge; the intruder drops their
// reports, logs it, naming the sender, and applies none; the two drop
// the intruder's, log it, and apply none; each of the two hears only the
// other, with matching policies, and the intruder hears nobody.
func TestClusterWrongSecretOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		secret := func(name, key string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("secret_file = %q\n", p)
		}
		good, wrong := secret("good", "correct horse battery staple"), secret("wrong", "not the cluster's secret")
		mem := memNet(1)
		c := startCluster(t, clusterInterval, []fakeSpec{
			{name: "a", text: clusterText(true, good), net: mem},
			{name: "b", text: clusterText(true, good), net: mem},
			{name: "intruder", text: clusterText(true, wrong), net: mem},
		})
		a, b, intruder := c[0], c[1], c[2]
		time.Sleep(2 * clusterInterval)
		checks := fakeConverged(t, a, []*fakeNode{b})

		// The intruder drops the cluster's reports and says so...
		if len(intruder.logs.Lines("dropping reports without a valid signature")) == 0 || intruder.gossip.node.Stats().DroppedAuth == 0 {
			t.Errorf("the intruder dropped %d datagrams for their signature; its log:\n%s", intruder.gossip.node.Stats().DroppedAuth, intruder.logs)
		}
		if !intruder.ask(t, checks[0]) {
			t.Fatal("a node with the wrong secret applied the cluster's report")
		}
		// ...and the cluster drops the intruder's.
		spendAll(t, intruder, clusterBurst, "forged")
		time.Sleep(clusterInterval + clusterDelay)
		for _, n := range []*fakeNode{a, b} {
			if !n.ask(t, "forged") {
				t.Errorf("%s applied a report signed with the wrong secret", n.name)
			}
			if len(n.logs.Lines("peer=intruder")) == 0 || n.gossip.node.Stats().DroppedAuth == 0 {
				t.Errorf("%s dropped %d datagrams for their signature, want the intruder's, logged; its log:\n%s", n.name, n.gossip.node.Stats().DroppedAuth, n.logs)
			}
		}
		// The peers views show it.
		for _, n := range []*fakeNode{a, b} {
			other := map[*fakeNode]*fakeNode{a: b, b: a}[n]
			p, ok := n.peer(other.id())
			if ps := n.peers(); len(ps) != 1 || !ok || !p.FingerprintMatch || p.Silent {
				t.Errorf("%s's peers %+v, want %s alone, heard, with matching policies (not the intruder)", n.name, ps, other.name)
			}
		}
		if ps := intruder.peers(); len(ps) != 0 {
			t.Errorf("the intruder's peers %+v, want none", ps)
		}
	})
}

// TestClusterStopSendsLastHitsOnFakeTime is tests/cluster's
// TestClusterStopSendsLastHits on fake time: with reports an hour apart,
// the only report a node sends is the one it sends as it stops, and it
// carries every hit: nothing of them reaches the peer before the stop,
// all of them a delivery after it.
func TestClusterStopSendsLastHitsOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memNet(1)
		text := fakeConfig(0.001, clusterBurst, time.Hour, true, "")
		c := startCluster(t, time.Second, []fakeSpec{{name: "a", text: text, net: mem}, {name: "b", text: text, net: mem}})
		a, b := c[0], c[1]
		spendAll(t, a, clusterBurst, "probe", "check")
		if !b.ask(t, "other") {
			t.Fatal("fresh tag refused")
		}
		time.Sleep(time.Minute)
		for _, tag := range []string{"probe", "check"} {
			if v := b.tagView(tag); v.Tracked {
				t.Fatalf("b knows of %s a minute after a spent it, with reports an hour apart: %+v", tag, v)
			}
		}
		a.stop()
		time.Sleep(clusterDelay)
		p, ok := b.peer(a.id())
		if !ok || p.Hits != 2*clusterBurst {
			t.Errorf("b's view of a after its stop: %+v (present %v), want the %d hits it served", p, ok, 2*clusterBurst)
		}
		if b.ask(t, "probe") || b.ask(t, "check") {
			t.Fatal("a stopped node's last hits did not all arrive")
		}
	})
}
