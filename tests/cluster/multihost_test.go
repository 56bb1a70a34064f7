package cluster

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// A multi-host cluster: each node is a real dthrottled in a network
// namespace of its own, with its own address on a veth pair whose other end
// is a port of a bridge in the test's namespace. Everything lives inside the
// user and network namespace netns.Run created: nothing reaches the host's
// interfaces. The test itself sits on the bridge (lanTest), so it can read
// every node's admin endpoint, listen to the group and inject datagrams.
//
//	 node 1 (netns)        node 2 (netns)        ...
//	 n1 10.77.0.1/24       n2 10.77.0.2/24
//	   |  veth               |  veth
//	 b1 ---------------- br0 10.77.0.254 ---- b2 ...   (test's netns)
//
// The bridge floods multicast to every port (IGMP snooping off), and
// nftables rules on it inject faults.

// TestMultiHost checks the multi-host cluster itself: each node alone in
// its namespace with its own address, the bridge flooding multicast, the
// nodes hearing each other from their own addresses, and a tag spent on
// one refused on the others once reported.
func TestMultiHost(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 3)
	for _, h := range l.Hosts {
		h.Ns.Do(func() error {
			ifs, err := net.Interfaces()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ifi := range ifs {
				names = append(names, ifi.Name)
			}
			if got, want := strings.Join(names, " "), "lo "+h.Link; got != want {
				t.Errorf("interfaces in host %d's namespace: %s, want %s", h.N, got, want)
			}
			return nil
		})
	}
	out, err := exec.Command(netns.Tool(t, "ip"), "-d", "link", "show", harness.LANBridge).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mcast_snooping 0") {
		t.Fatalf("bridge: %v %s; want mcast_snooping 0", err, out)
	}

	c := harness.FaultPolicy
	c.Policies = "[[policy]]\nname = \"probe\"\nprefix = \"probe:\"\nrate = 0.001\nburst = 5\n"
	ds := l.StartAll(t, c)
	for i, d := range ds {
		for j, h := range l.Hosts {
			if i == j {
				continue
			}
			// Reports leave from a socket of their own (its port free, not
			// the group's), so that answers to them reach that daemon alone.
			p, ok := d.Peers(t)[ds[j].NodeID(t)]
			host, port, _ := net.SplitHostPort(p.Addr)
			if !ok || host != h.Addr || port == "7777" || !p.Match {
				t.Errorf("node %d's view of node %d: %+v (present %v), want it heard from %s, from a port of its own, with matching policies", i+1, j+1, p, ok, h.Addr)
			}
		}
	}
	if got := harness.Pipeline(t, ds[0].Sock, strings.Repeat("probe:x\n", 6)); got != strings.Repeat("OK\n", 5)+"NO\n" {
		t.Fatalf("spending probe:x on node 1: %q", got)
	}
	for i, d := range ds[1:] {
		testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("node %d to apply node 1's report", i+2), func() bool {
			return d.Tag(t, "probe:x").Tokens < 1
		})
		if harness.Ask(t, d.Sock, "probe:x") {
			t.Errorf("node %d served probe:x, spent on node 1", i+2)
		}
	}
	if c0 := harness.Totals(t, ds[0]); c0["received"] == 0 || c0["own"] == 0 || c0["lost"] != 0 || c0["duplicate"] != 0 {
		t.Errorf("node 1 counters: %v; want datagrams received and its own heard back, none lost or duplicated", c0)
	}
}
