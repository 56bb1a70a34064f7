package harness

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
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

const (
	lanGroup    = "239.255.77.77:7777"
	LANBridge   = "br0"
	lanTest     = "10.77.0.254" // the test's own address, on the bridge
	LANInterval = 200 * time.Millisecond
)

// LAN is the bridge and the hosts on it.
type LAN struct {
	Hosts []*Host
}

// Host is one node's namespace and the daemon running in it, if any.
type Host struct {
	N    int    // 1, 2, ...
	Link string // its side of the veth pair, in ns: "n1"
	Port string // the bridge's side: "b1"
	Addr string // "10.77.0.1"
	Ns   *netns.NS

	Mu  sync.Mutex
	D   *Daemon    // nil while down
	cfg NodeConfig // what d was started with
}

// NewLAN builds a bridge and n hosts on it. It refuses to run anywhere
// but inside the namespace netns.Run made.
func NewLAN(t *testing.T, n int) *LAN {
	t.Helper()
	if !netns.Inside() {
		t.Fatal("newLAN outside a namespace of the test's own: refusing to touch this network")
	}
	l := &LAN{}
	cmds := []string{
		"link add " + LANBridge + " type bridge mcast_snooping 0",
		"addr add " + lanTest + "/24 dev " + LANBridge,
		"link set " + LANBridge + " up",
	}
	for i := 1; i <= n; i++ {
		ns, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h := &Host{N: i, Link: fmt.Sprintf("n%d", i), Port: fmt.Sprintf("b%d", i), Addr: fmt.Sprintf("10.77.0.%d", i), Ns: ns}
		l.Hosts = append(l.Hosts, h)
		cmds = append(cmds,
			fmt.Sprintf("link add %s type veth peer name %s netns %s", h.Port, h.Link, ns.Path()),
			fmt.Sprintf("link set %s master %s", h.Port, LANBridge),
			fmt.Sprintf("link set %s up", h.Port))
	}
	Feed(t, nil, strings.Join(cmds, "\n"), "ip", "-batch", "-")
	for _, h := range l.Hosts {
		Feed(t, h.Ns, fmt.Sprintf("link set lo up\naddr add %s/24 dev %s\nlink set %[2]s up\nroute add 224.0.0.0/4 dev %[2]s\n", h.Addr, h.Link),
			"ip", "-batch", "-")
	}
	return l
}

// Feed runs a system tool with input on its stdin, in ns (nil: the
// test's namespace, where the bridge is): "ip -batch -", "nft -f -".
func Feed(t *testing.T, ns *netns.NS, input, name string, args ...string) {
	t.Helper()
	path := netns.Tool(t, name)
	run := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stdin = strings.NewReader(input)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v: %s\ninput:\n%s", name, strings.Join(args, " "), err, out, input)
		}
		return nil
	}
	do := run
	if ns != nil {
		do = func() error { return ns.Do(run) }
	}
	if err := do(); err != nil {
		t.Fatal(err)
	}
}

// NFT loads an nftables ruleset where the bridge is.
func NFT(t *testing.T, ruleset string) {
	t.Helper()
	Feed(t, nil, ruleset, "nft", "-f", "-")
}

// NodeConfig is what differs between the nodes' configurations.
type NodeConfig struct {
	Rate     float64
	Burst    int
	Secret   string // secret_file, "" for none
	Policies string // [[policy]] tables
	Gossip   string // more [gossip] keys, such as "warm_start = false\n"
	More     string // more sections, such as "[haproxy]\n..."
}

// config is h's dthrottle.toml: multicast on its veth, admin on its own
// address, so the test reaches it over the bridge (nftables rules only ever
// touch the gossip port).
func (h *Host) configFor(c NodeConfig) string {
	secret := ""
	if c.Secret != "" {
		secret = fmt.Sprintf("secret_file = %q\n", c.Secret)
	}
	return fmt.Sprintf(`[listen]
unix = "%%SOCK%%"
[limit]
rate = %g
burst = %d
%s
[gossip]
interval = %q
group = %q
interface = %q
ttl = 1
%s%s
[admin]
http = "%s:0"
%s`, c.Rate, c.Burst, c.Policies, LANInterval.String(), lanGroup, h.Link, secret, c.Gossip, h.Addr, c.More)
}

// Start runs a daemon in h's namespace with the given configuration, until
// the test ends.
func (h *Host) Start(t *testing.T, c NodeConfig) *Daemon {
	t.Helper()
	return h.StartConfig(t, c, h.configFor(c))
}

// StartConfig runs a daemon in h's namespace with config, made from c
// (which restart uses again), until the test ends.
func (h *Host) StartConfig(t *testing.T, c NodeConfig, config string) *Daemon {
	t.Helper()
	var d *Daemon
	if err := h.Ns.Do(func() error { d = StartDaemon(t, config); return nil }); err != nil {
		t.Fatal(err)
	}
	h.Mu.Lock()
	h.D, h.cfg = d, c
	h.Mu.Unlock()
	return d
}

// Daemon is the running daemon, nil while h is down.
func (h *Host) Daemon() *Daemon {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.D
}

// Kill stops h's daemon with SIGKILL, as a crash would, and returns it.
func (h *Host) Kill(t *testing.T) *Daemon {
	t.Helper()
	h.Mu.Lock()
	d := h.D
	h.D = nil
	h.Mu.Unlock()
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.Done:
		d.Done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("dthrottled still running 10s after SIGKILL")
	}
	return d
}

// Restart starts h again with its last configuration: a new process, so
// a new node id and full buckets.
func (h *Host) Restart(t *testing.T) *Daemon {
	t.Helper()
	h.Mu.Lock()
	c := h.cfg
	h.Mu.Unlock()
	return h.Start(t, c)
}

// StartAll starts every host with c and waits until each hears all others.
func (l *LAN) StartAll(t *testing.T, c NodeConfig) []*Daemon {
	t.Helper()
	var ds []*Daemon
	for _, h := range l.Hosts {
		ds = append(ds, h.Start(t, c))
	}
	AwaitPeers(t, ds, len(ds)-1)
	return ds
}

// AwaitPeers waits until every daemon hears n peers.
func AwaitPeers(t *testing.T, ds []*Daemon, n int) {
	t.Helper()
	for _, d := range ds {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%s to hear %d peers", d.Sock, n), func() bool {
			return Metric(t, Scrape(t, d.AdminAddr(t)), "dthrottle_gossip_peers") == float64(n)
		})
	}
}

// Settle waits until every report that may carry a hit served before end
// has reached every other node or been counted lost there: each node has
// reported since end, and every other node has heard from it since.
func Settle(t *testing.T, ds []*Daemon, end time.Time) {
	t.Helper()
	reported := make([]time.Time, len(ds))
	for i, d := range ds {
		testkit.WaitFor(t, 5*time.Second, "a report after the load", func() bool {
			reported[i] = d.LastReport(t)
			return reported[i].After(end)
		})
	}
	for i, d := range ds {
		id := d.NodeID(t)
		for j, r := range ds {
			if i == j {
				continue
			}
			testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("node %d to hear node %d's last report", j+1, i+1), func() bool {
				heard, err := time.Parse(time.RFC3339Nano, r.Peers(t)[id].LastHeard)
				return err == nil && heard.After(reported[i])
			})
		}
	}
}

// Missed is how many of the hits each daemon of ds served another never
// applied: the hits lost in the network. It returns the most any one
// receiver missed and the sum over all, and fails t if a node applied more
// of a peer's hits than the peer served. Call it after settle.
func Missed(t *testing.T, l *Load, ds []*Daemon) (worst, sum int) {
	t.Helper()
	for i, r := range ds {
		view, n := r.Peers(t), 0
		for j, p := range ds {
			if p == r {
				continue
			}
			served, applied := l.Served(p), int(view[p.NodeID(t)].Hits)
			if applied > served {
				t.Errorf("node %d applied %d hits from node %d, which served %d", i+1, applied, j+1, served)
			}
			n += served - applied
		}
		worst, sum = max(worst, n), sum+n
	}
	return worst, sum
}

// Tap listens to the cluster's group from the test's own address on the
// bridge, and sends to it: the network seen and reached by a stranger.
type Tap struct {
	tr *transport.MulticastTransport
}

func NewTap(t *testing.T) *Tap {
	t.Helper()
	tr, err := transport.ListenMulticast(transport.MulticastConfig{Group: lanGroup, Interface: LANBridge, TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &Tap{tr}
}

// Capture returns the first datagram heard that decodes under key and
// satisfies match.
func (tp *Tap) Capture(t *testing.T, key []byte, match func(p transport.Packet, m wire.Message) bool) (transport.Packet, wire.Message) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case p := <-tp.tr.Packets():
			if m, err := wire.Decode(p.Data, key); err == nil && match(p, m) {
				return p, m
			}
		case <-timeout:
			t.Fatal("no such datagram heard on the group within 10s")
		}
	}
}

// Send sends b to the group from the test's address.
func (tp *Tap) Send(t *testing.T, b []byte) {
	t.Helper()
	if err := tp.tr.Send(b); err != nil {
		t.Fatal(err)
	}
}
