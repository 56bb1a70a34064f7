package faults

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// Two segments ("data centres") joined by relays: each is a bridge of
// three hosts in the test's namespace, multicast inside it; the test's
// namespace routes between the two subnets, and only the relays' unicast
// crossings cross it. Everything lives inside the namespace netns.Run
// made.
//
//	a1 a2 a3 (10.78.1.x)           b1 b2 b3 (10.78.2.x)
//	   |  |  |                        |  |  |
//	  br-a 10.78.1.254 --(routed)-- br-b 10.78.2.254     (test's netns)
//
// a1, a2, b1 and b2 are relays, each listing the other segment's two as
// relay.peers; a3 and b3 report through their segment's relays.

const (
	segRelayPort = 7778
	segHold      = 0.5
)

// segPolicy: a burst of 10 and a rate of 20/s, as the fault tests'.
var segPolicy = harness.FaultPolicy

// newSegment builds bridge name with n hosts on subnet "10.78.<net>".
func newSegment(t *testing.T, name string, subnet, n int) []*harness.Host {
	t.Helper()
	if !netns.Inside() {
		t.Fatal("newSegment outside a namespace of the test's own: refusing to touch this network")
	}
	gw := fmt.Sprintf("10.78.%d.254", subnet)
	cmds := []string{
		"link add " + name + " type bridge mcast_snooping 0",
		"addr add " + gw + "/24 dev " + name,
		"link set " + name + " up",
	}
	var hosts []*harness.Host
	for i := 1; i <= n; i++ {
		ns, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h := &harness.Host{N: i, Link: "n1", Port: fmt.Sprintf("%s-%d", name, i), Addr: fmt.Sprintf("10.78.%d.%d", subnet, i), Ns: ns}
		hosts = append(hosts, h)
		cmds = append(cmds,
			fmt.Sprintf("link add %s type veth peer name %s netns %s", h.Port, h.Link, ns.Path()),
			fmt.Sprintf("link set %s master %s", h.Port, name),
			fmt.Sprintf("link set %s up", h.Port))
	}
	harness.Feed(t, nil, strings.Join(cmds, "\n"), "ip", "-batch", "-")
	for _, h := range hosts {
		harness.Feed(t, h.Ns, fmt.Sprintf("link set lo up\naddr add %s/24 dev %s\nlink set %[2]s up\nroute add 224.0.0.0/4 dev %[2]s\nroute add default via %s\n", h.Addr, h.Link, gw),
			"ip", "-batch", "-")
	}
	return hosts
}

// relayConfig is the [relay] section of a host: the first two of each
// segment serve, listing the other segment's relays.
func relayConfig(serve bool, others []*harness.Host) string {
	if !serve {
		return "\n[relay]\nmode = \"use\"\n"
	}
	var peers []string
	for _, h := range others[:2] {
		peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%s:%d", h.Addr, segRelayPort)))
	}
	return fmt.Sprintf("\n[relay]\nmode = \"serve\"\nhold = %g\nbind = \":%d\"\npeers = [%s]\n", segHold, segRelayPort, strings.Join(peers, ", "))
}

// relayBound is the cluster bound with relays across s segments
// (docs/scaling.md): b + r*w + (n-1)*(b + r*(3I + 4d) + 2(θ-1)) +
// s*(θ-1)*(1 + w/A), θ = ceil(hold*b), A = b/r in whole intervals.
func relayBound(n, s int, c harness.NodeConfig, d, w time.Duration) float64 {
	b, r := float64(c.Burst), c.Rate
	theta := math.Ceil(segHold * b)
	iv := harness.LANInterval.Seconds()
	a := math.Ceil(b/r/iv) * iv
	return b + r*w.Seconds() + float64(n-1)*(b+r*(3*iv+4*d.Seconds())+2*(theta-1)) + float64(s)*(theta-1)*(1+w.Seconds()/a)
}

// relays reads a daemon's relays heard now, in its segment and beyond.
func relays(t *testing.T, d *harness.Daemon) (segment, remote float64) {
	f := harness.Scrape(t, d.AdminAddr(t))
	return harness.Metric(t, f, "dthrottle_relay_relays", "where=segment"), harness.Metric(t, f, "dthrottle_relay_relays", "where=remote")
}

// TestSegments: a client hammering one tag across two segments joined by
// relays, with 10% loss on the routed link, is held to the cluster bound
// and to one rate; with the link cut, each segment holds its own rate and
// says so; healed, the segments share one rate again.
func TestSegments(t *testing.T) {
	t.Parallel() // in namespaces of its own, mostly waiting
	if !netns.Run(t) {
		return
	}
	harness.Feed(t, nil, "1\n", "tee", "/proc/sys/net/ipv4/ip_forward")
	segA, segB := newSegment(t, "br-a", 1, 3), newSegment(t, "br-b", 2, 3)
	all := append(append([]*harness.Host(nil), segA...), segB...)
	var ds []*harness.Daemon
	for _, seg := range [][2][]*harness.Host{{segA, segB}, {segB, segA}} {
		for i, h := range seg[0] {
			c := segPolicy
			c.Gossip = relayConfig(i < 2, seg[1])
			ds = append(ds, h.Start(t, c))
		}
	}
	for i, d := range ds {
		wantSeg, wantRemote := 2.0, 0.0
		if i%3 < 2 {
			wantSeg, wantRemote = 1, 2 // a relay does not count itself
		}
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("host %d to hear its relays", i+1), func() bool {
			seg, remote := relays(t, d)
			return seg == wantSeg && remote == wantRemote
		})
	}

	// The peers view marks the relays: its segment's other one, and the
	// other segment's two.
	kinds := map[string]int{}
	for _, p := range ds[0].Peers(t) {
		kinds[p.Relay]++
	}
	if kinds["segment"] != 1 || kinds["remote"] != 2 {
		t.Errorf("a1's peers view shows relays %v, want 1 of its segment and 2 remote", kinds)
	}

	// One limit across both segments, with loss on the link.
	harness.NFT(t, `table inet link {
	chain forward {
		type filter hook forward priority 0; policy accept;
		udp dport 7778 numgen random mod 100 < 10 drop
	}
}`)
	ld := harness.StartLoad(all, "cross", 8*time.Second)
	ld.Wait(t, 0)
	// The last hits reach every node, or are asked for until counted
	// lost (a crossing only after peer.MaxAsks asks); then the loss ends,
	// for the relays' crossings go on every interval, and under loss
	// their gaps would be asked for as long as it lasts.
	endLoss(t, ds, ld.End, "delete table inet link\n")
	awaitRepairs(t, ds)
	// Crossings lost on the link are asked for again (docs/design.md,
	// "Lost reports are repaired"): repaired, or counted lost.
	var lostCrossings, repaired float64
	for _, d := range ds {
		f := harness.Scrape(t, d.AdminAddr(t))
		lostCrossings += harness.Metric(t, f, "dthrottle_relay_crossings_lost_total")
		repaired += harness.Metric(t, f, "dthrottle_gossip_packets_repaired_total")
	}
	if lostCrossings+repaired == 0 {
		t.Error("no crossing repaired or counted lost: was the link lossy at all?")
	}
	// A lost crossing carries at most what its segment served in one
	// interval, and each relay receiving it misses it.
	perInterval := max(ld.MostIn(harness.LANInterval, ds[:3]...), ld.MostIn(harness.LANInterval, ds[3:]...))
	lost := int(lostCrossings) * perInterval
	limit := checkRelayBound(t, ld, len(ds), lost)
	steady := ld.ServedIn(ld.Start.Add(3*time.Second), ld.End.Add(time.Nanosecond))
	window := ld.End.Sub(ld.Start.Add(3 * time.Second)).Seconds()
	if rate := float64(steady) / window; rate > 1.5*segPolicy.Rate {
		t.Errorf("served %.1f/s after the first 3s, want about the one rate %g/s (two segments alone would serve %g/s)", rate, segPolicy.Rate, 2*segPolicy.Rate)
	}
	harness.Figures(t, ld, limit, fmt.Sprintf("10%% loss on the link: %.0f datagrams repaired, %.0f crossings lost (up to %d hits); %.1f/s after the first 3s", repaired, lostCrossings, lost, float64(steady)/window), harness.Totals(t, ds...))

	// Cut the link: each segment keeps its own rate, and says so.
	harness.NFT(t, `table inet cut {
	chain forward {
		type filter hook forward priority 0; policy accept;
		ip saddr 10.78.1.0/24 ip daddr 10.78.2.0/24 drop
		ip saddr 10.78.2.0/24 ip daddr 10.78.1.0/24 drop
	}
}`)
	relaysOf := []*harness.Daemon{ds[0], ds[1], ds[3], ds[4]}
	for _, d := range relaysOf {
		testkit.WaitFor(t, 10*time.Second, "the relays to find the link cut", func() bool {
			_, remote := relays(t, d)
			return remote == 0
		})
		if len(d.LogLines("relay of another segment went silent")) != 2 {
			t.Errorf("relay %s did not log both of the other segment's relays as silent:\n%s", d.Sock, d.Stderr.String())
		}
		if n := harness.Metric(t, harness.Scrape(t, d.AdminAddr(t)), "dthrottle_relay_remote_silences_total"); n != 2 {
			t.Errorf("relay %s counted %v remote silences, want 2", d.Sock, n)
		}
	}
	cut := harness.StartLoad(all, "cut", 4*time.Second)
	cut.Wait(t, 0)
	sideLimit := relayBound(3, 1, segPolicy, harness.FaultDelay, cut.Duration())
	var sides []string
	for i, side := range [][]*harness.Daemon{ds[:3], ds[3:]} {
		n := cut.Served(side...)
		if float64(n) > sideLimit || float64(n) < segPolicy.Rate*cut.Duration().Seconds()/2 {
			t.Errorf("segment %d served %d while cut off for %v: want at most the bound %.0f for its three nodes, and about r*T (%.0f)",
				i+1, n, cut.Duration(), sideLimit, segPolicy.Rate*cut.Duration().Seconds())
		}
		sides = append(sides, fmt.Sprintf("%d (%.1f/s)", n, float64(n)/cut.Duration().Seconds()))
	}

	// Heal: the relays hear each other again, and one rate holds.
	harness.NFT(t, "delete table inet cut\n")
	for _, d := range relaysOf {
		testkit.WaitFor(t, 10*time.Second, "the relays to hear across again", func() bool {
			_, remote := relays(t, d)
			return remote == 2
		})
		if len(d.LogLines("relay of another segment heard", "again=true")) == 0 {
			t.Errorf("relay %s did not log the other segment's return", d.Sock)
		}
	}
	healed := harness.StartLoad(all, "healed", 4*time.Second)
	healed.Wait(t, 0)
	healedLimit := checkRelayBound(t, healed, len(ds), 0)
	t.Logf("figures: %s: cut for %.1fs: the segments served %s against %.0f each; healed: %d in %.1fs against %.0f",
		t.Name(), cut.Duration().Seconds(), strings.Join(sides, " and "), sideLimit, healed.Served(), healed.Duration().Seconds(), healedLimit)
}

// checkRelayBound checks what the load was served, over the whole run and
// in its busiest second, against the relay bound for n nodes in two
// segments, plus lost hits, and returns the whole run's bound.
func checkRelayBound(t *testing.T, l *harness.Load, n, lost int) float64 {
	t.Helper()
	whole, second := relayBound(n, 2, segPolicy, harness.FaultDelay, l.Duration()), relayBound(n, 2, segPolicy, harness.FaultDelay, time.Second)
	if s := l.Served(); float64(s) > whole+float64(lost) {
		t.Errorf("served %d in %v, over the relay bound %.0f for %d nodes plus %d hits lost", s, l.Duration(), whole, n, lost)
	}
	if s := l.Most(time.Second); float64(s) > second+float64(lost) {
		t.Errorf("served %d in 1s, over the relay bound %.0f for %d nodes plus %d hits lost", s, second, n, lost)
	}
	return whole
}
