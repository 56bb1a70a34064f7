package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// The fault tests hammer one tag on every node of a multi-host cluster
// (tests/cluster/multihost_test.go) while something goes wrong between the peers, and
// hold the served count to the cluster bound (docs/design.md, The cluster bound). Each logs a "figures:"
// line (go test -v) for docs/reliability.md's table of faults between peers.

// checkBound checks what the load was served, over the whole run and in
// its busiest second, against the bound for n nodes of policy c with delay
// d, plus lost hits, and returns the whole run's bound.
func checkBound(t *testing.T, l *harness.Load, n int, c harness.NodeConfig, d time.Duration, lost int) float64 {
	t.Helper()
	whole, second := harness.Bound(n, c, d, l.Duration()), harness.Bound(n, c, d, time.Second)
	if s := l.Served(); float64(s) > whole+float64(lost) {
		t.Errorf("served %d in %v, over the bound %.0f for %d nodes plus %d hits lost", s, l.Duration(), whole, n, lost)
	}
	if s := l.Most(time.Second); float64(s) > second+float64(lost) {
		t.Errorf("served %d in 1s, over the bound %.0f for %d nodes plus %d hits lost", s, second, n, lost)
	}
	return whole
}

func TestFaults(t *testing.T) {
	t.Run("loss", faultLoss)
	t.Run("kill", faultKill)
	t.Run("partition", faultPartition)
	t.Run("duplicate_reorder", faultDuplicateReorder)
	t.Run("forged_replayed", func(t *testing.T) {
		t.Run("secret", func(t *testing.T) { faultForged(t, true) })
		t.Run("no_secret", func(t *testing.T) { faultForged(t, false) })
	})
	t.Run("policies", faultPolicies)
}

// faultLoss: 20% of the datagrams the bridge forwards are dropped
// (reports, repair requests and resends alike). Every node asks for what
// it misses and has it sent again (docs/design.md, "Lost reports are
// repaired"), so few hits are lost for good; the cluster may serve more
// than the bound by at most those. repair_test.go compares such
// runs with lossless ones.
func faultLoss(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 4)
	ds := l.StartAll(t, harness.FaultPolicy)
	harness.NFT(t, `table bridge loss {
	chain forward {
		type filter hook forward priority 0; policy accept;
		meta l4proto udp numgen random mod 100 < 20 drop
	}
}`)
	ld := harness.StartLoad(l.Hosts, "loss", 6*time.Second)
	ld.Wait(t, 0)
	endLoss(t, ds, ld.End, "delete table bridge loss\n")
	harness.Settle(t, ds, ld.End)
	awaitRepairs(t, ds)
	// The node that serves last in a window bounds it; it may have
	// missed at most what the receiver that missed most did.
	worst, sum := harness.Missed(t, ld, ds)
	limit := checkBound(t, ld, len(ds), harness.FaultPolicy, harness.FaultDelay, worst)
	for i, d := range ds {
		if c := harness.Totals(t, d); c["asked"] == 0 || c["repaired"] == 0 {
			t.Errorf("node %d asked for no datagram again, or had none repaired: %v", i+1, c)
		}
	}
	// Without repair, each receiver misses about 20% of what the others
	// serve: 80 to 95 hits over all in such a run. With it, 0 to 16, and
	// once 40 under -race beside other tests, while no node counted a
	// datagram lost.
	if unrepaired := float64(ld.Served()*(len(ds)-1)) * 0.2; float64(sum) > unrepaired/2 {
		t.Errorf("%d hits lost over all receivers, want well under the %.0f that 20%% loss takes without repair", sum, unrepaired)
	}
	harness.Figures(t, ld, limit, fmt.Sprintf("hits lost %d over all receivers, at most %d at one", sum, worst), harness.Totals(t, ds...))
}

// faultKill: a node is killed with SIGKILL mid-load and started again. The
// hits it served since its last report die with it: at most one interval's
// worth, which the others never apply. The new process is a new node (new
// id, full buckets): the bound is that of one node more, plus those hits.
func faultKill(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 4)
	ds := l.StartAll(t, harness.FaultPolicy)
	victim, old := l.Hosts[1], ds[1]
	oldID := old.NodeID(t)
	survivors := []*harness.Daemon{ds[0], ds[2], ds[3]}
	ld := harness.StartLoad(l.Hosts, "kill", 6*time.Second)
	harness.At(ld, 2*time.Second)
	// Kill it while it holds hits it has not reported.
	harness.Poll(t, 5*time.Second, "the victim to hold unreported hits", func() bool { return old.Tag(t, "kill").Unreported > 0 })
	reported := old.LastReport(t)
	victim.Kill(t)
	killed := time.Now()
	fresh := victim.Restart(t)
	up := time.Since(killed)
	newID := fresh.NodeID(t)
	if newID == oldID {
		t.Fatalf("restarted node kept its id %s", oldID)
	}
	for _, d := range survivors {
		d.AwaitPeer(t, newID, false)
		d.AwaitPeer(t, oldID, true)
	}
	ld.Wait(t, 1)
	alive := append(slices.Clone(survivors), fresh)
	harness.Settle(t, alive, ld.End)

	// What the killed node served and no survivor ever applied: the
	// same for all, on a lossless bridge, and no more than it served
	// since its last report (reports go every interval).
	servedOld := ld.Served(old)
	unreported := -1
	for i, d := range survivors {
		n := servedOld - int(d.Peers(t)[oldID].Hits)
		if unreported >= 0 && n != unreported {
			t.Errorf("survivor %d missed %d of the killed node's hits, another %d: the bridge is lossless", i, n, unreported)
		}
		unreported = n
	}
	sinceReport := ld.ServedIn(reported, killed, old)
	if unreported < 0 || unreported > sinceReport {
		t.Errorf("%d hits of the killed node lost, want between 0 and the %d it served since its last report", unreported, sinceReport)
	}
	if worst, _ := harness.Missed(t, ld, survivors); worst != 0 {
		t.Errorf("survivors missed %d of each other's hits on a lossless bridge", worst)
	}
	limit := checkBound(t, ld, len(ds)+1, harness.FaultPolicy, harness.FaultDelay, unreported)
	harness.Figures(t, ld, limit, fmt.Sprintf("killed at %.1fs, %v after its last report: %d served by it, %d of them never reported (%d served since that report); restarted, answering, within %v",
		killed.Sub(ld.Start).Seconds(), killed.Sub(reported).Round(time.Millisecond), servedOld, unreported, sinceReport, up.Round(time.Millisecond)), harness.Totals(t, alive...))
}

// faultPartition: nftables cuts the bridge between nodes 1-2 and 3-4 for
// the first half of the load, then the cut heals. Each side holds its own
// rate meanwhile (the cluster serves about twice r); once healed, the
// datagrams missed are counted lost and the cluster is back under the
// bound of all four.
func faultPartition(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 4)
	ds := l.StartAll(t, harness.FaultPolicy)
	harness.NFT(t, `table bridge partition {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname { "b1", "b2" } oifname { "b3", "b4" } udp dport 7777 drop
		iifname { "b3", "b4" } oifname { "b1", "b2" } udp dport 7777 drop
	}
}`)
	ld := harness.StartLoad(l.Hosts, "split", 8*time.Second)
	for _, d := range ds[:2] {
		d.AwaitPeer(t, ds[2].NodeID(t), true)
		d.AwaitPeer(t, ds[3].NodeID(t), true)
	}
	split := harness.At(ld, 4*time.Second).Sub(ld.Start) // cut until then
	harness.NFT(t, "delete table bridge partition\n")
	healed := time.Now() // whole from then on
	for _, d := range ds[:2] {
		d.AwaitPeer(t, ds[3].NodeID(t), false)
	}
	ld.Wait(t, 0)
	harness.Settle(t, ds, ld.End)

	sideLimit := harness.Bound(2, harness.FaultPolicy, harness.FaultDelay, split)
	var sides []string
	for i, side := range [][]*harness.Daemon{ds[:2], ds[2:]} {
		n := ld.ServedIn(ld.Start, ld.Start.Add(split), side...)
		// Not starved either: it had its own rate, less what a debt
		// carried in could take.
		if float64(n) > sideLimit || float64(n) < harness.FaultPolicy.Rate*split.Seconds()/2 {
			t.Errorf("side %d served %d while split for %v: want at most the bound %.0f for two nodes, and about r*T (%.0f)", i+1, n, split, sideLimit, harness.FaultPolicy.Rate*split.Seconds())
		}
		sides = append(sides, fmt.Sprintf("%d (%.1f/s)", n, float64(n)/split.Seconds()))
	}
	rest := ld.End.Sub(healed)
	after := ld.ServedIn(healed, ld.End.Add(time.Nanosecond))
	afterLimit := harness.Bound(len(ds), harness.FaultPolicy, harness.FaultDelay, rest)
	if float64(after) > afterLimit {
		t.Errorf("served %d in the %v after healing, over the bound %.0f for the whole cluster", after, rest, afterLimit)
	}
	c := harness.Totals(t, ds...)
	if c["lost"] == 0 {
		t.Errorf("no datagram counted lost across the partition: %v", c)
	}
	harness.Figures(t, ld, sideLimit*2+afterLimit, fmt.Sprintf("split for %.1fs: the sides served %s against %.0f each; healed: %d in %.1fs (%.1f/s) against %.0f",
		split.Seconds(), strings.Join(sides, " and "), sideLimit, after, rest.Seconds(), float64(after)/rest.Seconds(), afterLimit), c)
}

// faultDuplicateReorder: nftables duplicates every datagram entering the
// bridge from a node (netdev "dup to" the other ports), and node 1's reach
// node 3 only through the test, which relays them in swapped pairs. The
// duplicates are dropped and counted; the late datagrams are applied, and
// no longer counted lost once they arrive; every hit is applied once.
func faultDuplicateReorder(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 3)
	var dup strings.Builder
	dup.WriteString("table netdev duplicate {\n")
	for _, h := range l.Hosts {
		fmt.Fprintf(&dup, "\tchain in_%s {\n\t\ttype filter hook ingress device %q priority 0; policy accept;\n", h.Port, h.Port)
		for _, o := range l.Hosts {
			// Node 1's datagrams go to node 3 only through the relay.
			if o != h && !(h.N == 1 && o.N == 3) {
				fmt.Fprintf(&dup, "\t\tudp dport 7777 dup to %q\n", o.Port)
			}
		}
		dup.WriteString("\t}\n")
	}
	dup.WriteString("}\n")
	harness.NFT(t, dup.String()+`table bridge reorder {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname "b1" oifname "b3" udp dport 7777 drop
	}
}`)
	swapped := harness.NewTap(t).Relay(l.Hosts[0].Addr)
	ds := l.StartAll(t, harness.FaultPolicy)
	ld := harness.StartLoad(l.Hosts, "dup", 5*time.Second)
	ld.Wait(t, 0)
	harness.Settle(t, ds, ld.End)
	if n := swapped.Load(); n < 5 {
		t.Errorf("relay swapped only %d pairs", n)
	}
	if worst, _ := harness.Missed(t, ld, ds); worst != 0 {
		t.Errorf("a node missed %d hits: late datagrams must be applied, duplicates must not", worst)
	}
	for i, d := range ds {
		if c := harness.Totals(t, d); c["duplicate"] == 0 {
			t.Errorf("node %d dropped no duplicate: %v", i+1, c)
		}
	}
	id1 := ds[0].NodeID(t)
	harness.Poll(t, 5*time.Second, "node 3 to count nothing lost from node 1 (late datagrams arrived)", func() bool {
		return ds[2].Peers(t)[id1].Lost == 0
	})
	// The relay holds a datagram until the next: up to an interval more.
	limit := checkBound(t, ld, len(ds), harness.FaultPolicy, harness.FaultDelay+harness.LANInterval, 0)
	harness.Figures(t, ld, limit, fmt.Sprintf("%d pairs of node 1's datagrams swapped on their way to node 3; every hit applied exactly once on every node", swapped.Load()), harness.Totals(t, ds...))
}

// faultForged: the test, a stranger on the bridge, forges reports and
// replays a real one it captured, to the live nodes and to a node restarted
// since. With a secret, forgeries are dropped (auth). Without, they are
// applied: anyone on the network can spend any tag (never grant tokens:
// reports only subtract), and silence a node by sending in its name far
// ahead in its sequence. Either way a replay is never applied twice.
func faultForged(t *testing.T, secret bool) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 3)
	c := harness.FaultPolicy
	c.Policies = "[[policy]]\nname = \"replay\"\nprefix = \"replay:\"\nrate = 0.001\nburst = 100\n"
	var key []byte
	keys := [][]byte{nil} // the forgeries' keys
	if secret {
		key = []byte("the cluster's secret, 32 bytes..")
		keys = append(keys, []byte("not the cluster's secret, 32 b.."))
		c.Secret = filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(c.Secret, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tp := harness.NewTap(t)
	ds := l.StartAll(t, c)
	id1 := ds[0].NodeID(t)
	_, m := tp.Capture(t, key, func(transport.Packet, wire.Message) bool { return true })
	forge := func(node uint64, k []byte, hits []wire.Hit, seq uint64) {
		enc := wire.Encoder{Node: node, Fingerprint: m.Fingerprint, MaxPacket: 1400, Key: k}
		if _, err := enc.Encode(time.Now(), hits, func(pkt []byte) error {
			if seq != 0 { // the header's sequence number: 8 bytes at 13, big-endian
				for i := range 8 {
					pkt[13+i] = byte(seq >> (56 - 8*i))
				}
			}
			tp.Send(t, pkt)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	const forger = 0x0bad0bad0bad0bad
	for _, k := range keys {
		forge(forger, k, []wire.Hit{{Key: "victim", Count: 1000}}, 0)
	}
	for i, d := range ds {
		harness.Poll(t, 5*time.Second, fmt.Sprintf("node %d to drop or apply the forgeries", i+1), func() bool {
			return harness.Totals(t, d)["auth"] >= float64(len(keys)) || d.Tag(t, "victim").Tokens < 0
		})
		_, listed := d.Peers(t)[fmt.Sprintf("%016x", forger)]
		if served := harness.Ask(t, d.Sock, "victim"); served != secret || listed == secret {
			t.Errorf("node %d, secret %v: victim served %v, forger in its peers %v", i+1, secret, served, listed)
		}
	}

	// A replay of node 1's report of 40 hits, to nodes that applied it.
	if got := harness.Pipeline(t, ds[0].Sock, strings.Repeat("replay:x\n", 40)); got != strings.Repeat("OK\n", 40) {
		t.Fatalf("spending replay:x on node 1: %q", got)
	}
	report, _ := tp.Capture(t, key, func(p transport.Packet, m wire.Message) bool {
		return fmt.Sprintf("%016x", m.Node) == id1 && slices.Contains(m.Hits, wire.Hit{Key: "replay:x", Count: 40})
	})
	applied := func(d *harness.Daemon, tag string) bool { v := d.Tag(t, tag); return v.Tracked && v.Tokens < 61 }
	var before []harness.Counters
	for i, d := range ds[1:] {
		harness.Poll(t, 5*time.Second, fmt.Sprintf("node %d to apply node 1's report", i+2), func() bool { return applied(d, "replay:x") })
		before = append(before, harness.Totals(t, d))
	}
	for range 3 {
		tp.Send(t, report.Data)
	}
	dropped := 0.0
	for i, d := range ds[1:] {
		harness.Poll(t, 5*time.Second, fmt.Sprintf("node %d to drop the replays (or apply one)", i+2), func() bool {
			return harness.Totals(t, d)["duplicate"] >= before[i]["duplicate"]+3 || d.Tag(t, "replay:x").Tokens < 59
		})
		if v := d.Tag(t, "replay:x"); v.Tokens < 59.9 {
			t.Errorf("node %d applied a replay: replay:x has %.2f tokens, want 60", i+2, v.Tokens)
		}
		dropped += harness.Totals(t, d)["duplicate"] - before[i]["duplicate"]
	}

	// The same replay to node 3 restarted: it never saw that report. It
	// warms from its peers first, adopting their level of replay:x (60
	// tokens); the replay would take 40 more.
	ds[2].Stop(t)
	fresh := l.Hosts[2].Restart(t)
	harness.AwaitPeers(t, []*harness.Daemon{fresh}, 2) // what was in flight when it started is behind
	harness.Poll(t, 5*time.Second, "the restarted node to adopt replay:x from its peers", func() bool { return applied(fresh, "replay:x") })
	fc := harness.Totals(t, fresh)
	tp.Send(t, report.Data)
	replayed := func() bool { return fresh.Tag(t, "replay:x").Tokens < 59 }
	harness.Poll(t, 5*time.Second, "the restarted node to drop the replay (or apply it)", func() bool {
		c := harness.Totals(t, fresh)
		return c["stale"]+c["duplicate"] > fc["stale"]+fc["duplicate"] || replayed()
	})
	if replayed() {
		t.Errorf("the restarted node applied a replayed report it had not seen: %+v", fresh.Tag(t, "replay:x"))
	}
	after := harness.Totals(t, fresh)
	outcome := "all dropped (auth) on every node, victim still served"
	if !secret {
		outcome = "applied on every node, victim refused everywhere"
		// Silencing node 1: one heartbeat in its name, far ahead; then
		// the report of a hit it serves is dropped like the rest.
		n1, _ := strconv.ParseUint(id1, 16, 64)
		forge(n1, nil, nil, 1<<62)
		if got := harness.Pipeline(t, ds[0].Sock, "replay:y\n"); got != "OK\n" {
			t.Fatalf("replay:y on node 1: %q", got)
		}
		spent := time.Now()
		harness.Poll(t, 5*time.Second, "node 1 to report replay:y", func() bool { return ds[0].LastReport(t).After(spent) })
		dups := harness.Totals(t, ds[1])["duplicate"]
		harness.Poll(t, 5*time.Second, "node 2 to hear node 1 twice more (in order, so the report too)", func() bool {
			return harness.Totals(t, ds[1])["duplicate"] >= dups+2 || ds[1].Tag(t, "replay:y").Tracked
		})
		if ds[1].Tag(t, "replay:y").Tracked {
			t.Error("node 2 applied node 1's report after a forged sequence number: not silenced")
		}
		outcome += "; after one forged heartbeat in node 1's name at sequence 2^62, node 1's real reports are dropped as duplicates"
	}
	t.Logf("figures: %s: forgeries %s; 3 replays to 2 live nodes: %.0f dropped as duplicates, replay:x still at 60 tokens; 1 replay to a restarted node: dropped as stale %.0f, as duplicate %.0f",
		t.Name(), outcome, dropped, after["stale"]-fc["stale"], after["duplicate"]-fc["duplicate"])
}

// faultPolicies: node 3 runs twice the rate and burst of the others. Every
// node counts the mismatching datagrams and warns once per such peer. The
// cluster no longer holds one rate: it holds the largest.
func faultPolicies(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 3)
	other := harness.NodeConfig{Rate: 2 * harness.FaultPolicy.Rate, Burst: 2 * harness.FaultPolicy.Burst}
	ds := []*harness.Daemon{l.Hosts[0].Start(t, harness.FaultPolicy), l.Hosts[1].Start(t, harness.FaultPolicy), l.Hosts[2].Start(t, other)}
	harness.AwaitPeers(t, ds, 2)
	ld := harness.StartLoad(l.Hosts, "policies", 3*time.Second)
	ld.Wait(t, 0)
	id3 := ds[2].NodeID(t)
	for i, d := range ds {
		harness.Poll(t, 5*time.Second, fmt.Sprintf("node %d to count 10 mismatching datagrams", i+1), func() bool { return harness.Totals(t, d)["mismatch"] >= 10 })
		warnings := d.LogLines("policies differ")
		want := 1
		if i == 2 {
			want = 2 // one for each of the others
		}
		if len(warnings) != want || (i < 2 && !strings.Contains(warnings[0], "node="+id3)) {
			t.Errorf("node %d warned %d times, want %d (once per peer with other policies):\n%s", i+1, len(warnings), want, strings.Join(warnings, "\n"))
		}
	}
	limit := checkBound(t, ld, len(ds), other, harness.FaultDelay, 0)
	harness.Figures(t, ld, limit, fmt.Sprintf("bound with the largest policy (rate %g, burst %d); %.0f with the others'", other.Rate, other.Burst, harness.Bound(len(ds), harness.FaultPolicy, harness.FaultDelay, ld.Duration())), harness.Totals(t, ds...))
}
