package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// warmPort is where the nodes of TestWarmStartGroupAndPeers take unicast
// reports, beside the group's port 7777.
const warmPort = 7788

// TestWarmStartGroupAndPeers starts a node with both a multicast group and
// unicast peers while another holds a spent tag: its snapshot request goes
// out on both sockets and the answering node answers whichever copy it
// hears first, once. Whether the copy answered is the group's (the unicast
// one dropped on the bridge), the unicast one (the group's dropped), or
// whichever came first (nothing dropped), the answer reaches the asker and
// it adopts the spent bucket.
func TestWarmStartGroupAndPeers(t *testing.T) {
	for _, drop := range []string{"none", "group", "unicast"} {
		t.Run("drop="+drop, func(t *testing.T) { warmGroupAndPeers(t, drop) })
	}
}

// withPeers is c with h's unicast socket on warmPort and the other hosts
// of l as its peers.
func withPeers(c harness.NodeConfig, l *harness.LAN, h *harness.Host) harness.NodeConfig {
	var peers []string
	for _, o := range l.Hosts {
		if o != h {
			peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%s:%d", o.Addr, warmPort)))
		}
	}
	c.Gossip += fmt.Sprintf("bind = \"%s:%d\"\npeers = [%s]\n", h.Addr, warmPort, strings.Join(peers, ", "))
	return c
}

func warmGroupAndPeers(t *testing.T, drop string) {
	if !netns.Run(t) {
		return
	}
	// A slow refill, so the spent bucket is still far below its burst
	// when the asker is looked at, seconds later.
	c := harness.NodeConfig{Rate: 0.5, Burst: 10}
	l := harness.NewLAN(t, 2)
	answerer, asker := l.Hosts[0], l.Hosts[1]
	a := answerer.Start(t, withPeers(c, l, answerer))
	harness.Poll(t, 10*time.Second, "the first node to be warm (nobody answers it)", func() bool {
		_, ok := harness.Scrape(t, a.AdminAddr(t))["dthrottle_warm_duration_seconds"]
		return ok
	})
	if got := harness.Pipeline(t, a.Sock, strings.Repeat("hot\n", c.Burst+2)); !strings.HasSuffix(got, "NO\nNO\n") {
		t.Fatalf("spending the tag: %q, want its last queries refused", got)
	}
	// An answer leaves out the hits no peer knows yet: once reported,
	// they are part of it.
	a.AwaitReportAfter(t, time.Now())
	// Drop, on the bridge, the asker's datagrams to the answerer on one
	// of the two paths: its request then arrives by the other only.
	port := map[string]int{"group": 7777, "unicast": warmPort}[drop]
	if port != 0 {
		harness.NFT(t, fmt.Sprintf(`table bridge onepath {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname %q oifname %q udp dport %d drop
	}
}`, asker.Port, answerer.Port, port))
	}
	b := asker.Start(t, withPeers(c, l, asker))
	harness.Poll(t, 10*time.Second, "the new node to adopt the spent bucket", func() bool {
		return harness.Metric(t, harness.Scrape(t, b.AdminAddr(t)), "dthrottle_warm_tags_total", "direction=adopted") >= 1
	})
	if v := b.Tag(t, "hot"); !v.Tracked || v.Tokens > float64(c.Burst)/2 {
		t.Errorf("the new node's bucket for the spent tag: %+v, want it tracked and well below the burst %d", v, c.Burst)
	}
	fa := harness.Scrape(t, a.AdminAddr(t))
	received := harness.Metric(t, fa, "dthrottle_warm_requests_total", "direction=received")
	refused := harness.Metric(t, fa, "dthrottle_warm_requests_total", "direction=refused")
	sent := harness.Metric(t, fa, "dthrottle_warm_answer_packets_total", "direction=sent")
	if sent < 1 || received < 1 {
		t.Errorf("the answering node counts %v requests received and %v answer packets sent, want at least one of each", received, sent)
	}
	if received-refused > 1 {
		t.Errorf("the answering node answered %v of %v requests from one asker, want one", received-refused, received)
	}
	if got := harness.Pipeline(t, b.Sock, "hot\nhot\nhot\nhot\nhot\nhot\n"); !strings.HasSuffix(got, "NO\n") {
		t.Errorf("the new node on the spent tag: %q, want it refused within a few queries", got)
	}
	t.Logf("drop=%s: requests received %v, refused %v; answer packets sent %v", drop, received, refused, sent)
}
