package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// The cluster tests run real dthrottled processes gossiping inside a user
// and network namespace each test creates (internal/netns): nothing they
// send reaches the host's interfaces. What the daemons do between them
// is checked on fake time in internal/daemon (cluster_fake_test.go,
// rolling_fake_test.go, spec_fake_test.go, statefile_fake_test.go,
// top_fake_test.go, warm_fake_test.go); this package keeps what only
// real sockets show: the multicast and unicast transports (this file),
// the worked example once on the defaults (spec_test.go), the multi-host
// LAN the other real tests stand on (multihost_test.go), discovery and
// names resolved, which are the unicast transport's on real UDP sockets
// (discovery_test.go, resolve_test.go), and the metrics the Grafana
// dashboard reads over HTTP.

const clusterBase = `
[listen]
unix = "%SOCK%"
[limit]
rate = 0.001
burst = 1000
[gossip]
`

// clusterBurst is the burst above: large enough that a node polled for a
// probe tag never runs out of its own tokens before a report arrives.
const clusterBurst = 1000

// startNode starts one daemon of a cluster with the given [gossip] keys.
func startNode(t *testing.T, gossip string) *harness.Daemon {
	t.Helper()
	return harness.StartDaemon(t, clusterBase+gossip)
}

// spend uses up each tag's whole burst on a node, pipelined.
func spend(t *testing.T, d *harness.Daemon, tags ...string) {
	t.Helper()
	for _, tag := range tags {
		in := strings.Repeat(tag+"\n", clusterBurst+1)
		want := strings.Repeat("OK\n", clusterBurst) + "NO\n"
		if got := harness.Pipeline(t, d.Sock, in); got != want {
			t.Fatalf("spending %s on a fresh node: %d OK, want %d then NO", tag, strings.Count(got, "OK"), clusterBurst)
		}
	}
}

// awaitRefused asks d for probe until it is refused, which shows the
// report carrying probe has arrived, and fails after within.
func awaitRefused(t *testing.T, d *harness.Daemon, probe string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for harness.Ask(t, d.Sock, probe) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still served on %s after %v: no report arrived\n%s", probe, d.Sock, within, d.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkConverged spends tags on from, then checks every other node
// refuses them once the report arrived: probe with one tag, then the
// other must be refused at its first query. The check is spent before the
// probe, so that it was reported with the probe or before it, whenever
// the node's report falls between the two.
func checkConverged(t *testing.T, from *harness.Daemon, others []*harness.Daemon, within time.Duration) {
	t.Helper()
	var tags []string
	for i := range others {
		tags = append(tags, fmt.Sprintf("check-%p-%d", from, i), fmt.Sprintf("probe-%p-%d", from, i))
	}
	spend(t, from, tags...)
	for i, d := range others {
		check, probe := tags[2*i], tags[2*i+1]
		awaitRefused(t, d, probe, within)
		if harness.Ask(t, d.Sock, check) {
			t.Fatalf("node %d served %s, spent on another node before the probe and reported with it or before", i+1, check)
		}
	}
}

func TestClusterMulticast(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	gossip := "interval = \"200ms\"\ngroup = \"239.255.77.77:7777\"\n"
	nodes := []*harness.Daemon{startNode(t, gossip), startNode(t, gossip), startNode(t, gossip)}
	checkConverged(t, nodes[0], nodes[1:], 5*time.Second)
	checkConverged(t, nodes[2], nodes[:2], 5*time.Second)
	// A daemon in another group hears none of it.
	lone := startNode(t, "interval = \"200ms\"\ngroup = \"239.255.77.78:7777\"\n")
	spend(t, nodes[1], "elsewhere")
	awaitRefused(t, nodes[0], "elsewhere", 5*time.Second)
	if !harness.Ask(t, lone.Sock, "elsewhere") {
		t.Fatal("a daemon in another group applied the report")
	}
}

func TestClusterUnicast(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	addrs := []string{"127.0.0.1:7801", "127.0.0.1:7802", "127.0.0.1:7803"}
	var nodes []*harness.Daemon
	for i, a := range addrs {
		var peers []string
		for j, p := range addrs {
			if j != i {
				peers = append(peers, fmt.Sprintf("%q", p))
			}
		}
		nodes = append(nodes, startNode(t, fmt.Sprintf("interval = \"200ms\"\nbind = %q\npeers = [%s]\n", a, strings.Join(peers, ", "))))
	}
	checkConverged(t, nodes[1], []*harness.Daemon{nodes[0], nodes[2]}, 5*time.Second)
}
