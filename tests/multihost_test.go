package tests

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/netns"
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
	lanBridge   = "br0"
	lanTest     = "10.77.0.254" // the test's own address, on the bridge
	lanInterval = 200 * time.Millisecond
)

// lan is the bridge and the hosts on it.
type lan struct {
	hosts []*host
}

// host is one node's namespace and the daemon running in it, if any.
type host struct {
	n    int    // 1, 2, ...
	link string // its side of the veth pair, in ns: "n1"
	port string // the bridge's side: "b1"
	addr string // "10.77.0.1"
	ns   *netns.NS

	mu  sync.Mutex
	d   *daemon    // nil while down
	cfg nodeConfig // what d was started with
}

// newLAN builds a bridge and n hosts on it. It refuses to run anywhere
// but inside the namespace netns.Run made.
func newLAN(t *testing.T, n int) *lan {
	t.Helper()
	if !netns.Inside() {
		t.Fatal("newLAN outside a namespace of the test's own: refusing to touch this network")
	}
	l := &lan{}
	cmds := []string{
		"link add " + lanBridge + " type bridge mcast_snooping 0",
		"addr add " + lanTest + "/24 dev " + lanBridge,
		"link set " + lanBridge + " up",
	}
	for i := 1; i <= n; i++ {
		ns, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h := &host{n: i, link: fmt.Sprintf("n%d", i), port: fmt.Sprintf("b%d", i), addr: fmt.Sprintf("10.77.0.%d", i), ns: ns}
		l.hosts = append(l.hosts, h)
		cmds = append(cmds,
			fmt.Sprintf("link add %s type veth peer name %s netns %s", h.port, h.link, ns.Path()),
			fmt.Sprintf("link set %s master %s", h.port, lanBridge),
			fmt.Sprintf("link set %s up", h.port))
	}
	feed(t, nil, strings.Join(cmds, "\n"), "ip", "-batch", "-")
	for _, h := range l.hosts {
		feed(t, h.ns, fmt.Sprintf("link set lo up\naddr add %s/24 dev %s\nlink set %[2]s up\nroute add 224.0.0.0/4 dev %[2]s\n", h.addr, h.link),
			"ip", "-batch", "-")
	}
	return l
}

// feed runs a system tool with input on its stdin, in ns (nil: the
// test's namespace, where the bridge is): "ip -batch -", "nft -f -".
func feed(t *testing.T, ns *netns.NS, input, name string, args ...string) {
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

// nft loads an nftables ruleset where the bridge is.
func nft(t *testing.T, ruleset string) {
	t.Helper()
	feed(t, nil, ruleset, "nft", "-f", "-")
}

// nodeConfig is what differs between the nodes' configurations.
type nodeConfig struct {
	rate     float64
	burst    int
	secret   string // secret_file, "" for none
	policies string // [[policy]] tables
	gossip   string // more [gossip] keys, such as "warm_start = false\n"
}

// faultPolicy is the default policy of the fault tests' clusters.
var faultPolicy = nodeConfig{rate: 20, burst: 10}

// config is h's dthrottle.toml: multicast on its veth, admin on its own
// address, so the test reaches it over the bridge (nftables rules only ever
// touch the gossip port).
func (h *host) configFor(c nodeConfig) string {
	secret := ""
	if c.secret != "" {
		secret = fmt.Sprintf("secret_file = %q\n", c.secret)
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
`, c.rate, c.burst, c.policies, lanInterval.String(), lanGroup, h.link, secret, c.gossip, h.addr)
}

// start runs a daemon in h's namespace with the given configuration, until
// the test ends.
func (h *host) start(t *testing.T, c nodeConfig) *daemon {
	t.Helper()
	return h.startConfig(t, c, h.configFor(c))
}

// startConfig runs a daemon in h's namespace with config, made from c
// (which restart uses again), until the test ends.
func (h *host) startConfig(t *testing.T, c nodeConfig, config string) *daemon {
	t.Helper()
	var d *daemon
	if err := h.ns.Do(func() error { d = startDaemon(t, config); return nil }); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.d, h.cfg = d, c
	h.mu.Unlock()
	return d
}

// daemon is the running daemon, nil while h is down.
func (h *host) daemon() *daemon {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.d
}

// kill stops h's daemon with SIGKILL, as a crash would, and returns it.
func (h *host) kill(t *testing.T) *daemon {
	t.Helper()
	h.mu.Lock()
	d := h.d
	h.d = nil
	h.mu.Unlock()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("dthrottled still running 10s after SIGKILL")
	}
	return d
}

// restart starts h again with its last configuration: a new process, so
// a new node id and full buckets.
func (h *host) restart(t *testing.T) *daemon {
	t.Helper()
	h.mu.Lock()
	c := h.cfg
	h.mu.Unlock()
	return h.start(t, c)
}

// startAll starts every host with c and waits until each hears all others.
func (l *lan) startAll(t *testing.T, c nodeConfig) []*daemon {
	t.Helper()
	var ds []*daemon
	for _, h := range l.hosts {
		ds = append(ds, h.start(t, c))
	}
	awaitPeers(t, ds, len(ds)-1)
	return ds
}

// awaitPeers waits until every daemon hears n peers.
func awaitPeers(t *testing.T, ds []*daemon, n int) {
	t.Helper()
	for _, d := range ds {
		poll(t, 10*time.Second, fmt.Sprintf("%s to hear %d peers", d.sock, n), func() bool {
			return metric(t, scrape(t, d.adminAddr(t)), "dthrottle_gossip_peers") == float64(n)
		})
	}
}

// poll calls cond until it holds, failing after within.
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until every report that may carry a hit served before end
// has reached every other node or been counted lost there: each node has
// reported since end, and every other node has heard from it since.
func settle(t *testing.T, ds []*daemon, end time.Time) {
	t.Helper()
	reported := make([]time.Time, len(ds))
	for i, d := range ds {
		poll(t, 5*time.Second, "a report after the load", func() bool {
			reported[i] = d.lastReport(t)
			return reported[i].After(end)
		})
	}
	for i, d := range ds {
		id := d.nodeID(t)
		for j, r := range ds {
			if i == j {
				continue
			}
			poll(t, 5*time.Second, fmt.Sprintf("node %d to hear node %d's last report", j+1, i+1), func() bool {
				heard, err := time.Parse(time.RFC3339Nano, r.peers(t)[id].LastHeard)
				return err == nil && heard.After(reported[i])
			})
		}
	}
}

// missed is how many of the hits each daemon of ds served another never
// applied: the hits lost in the network. It returns the most any one
// receiver missed and the sum over all, and fails t if a node applied more
// of a peer's hits than the peer served. Call it after settle.
func missed(t *testing.T, l *load, ds []*daemon) (worst, sum int) {
	t.Helper()
	for i, r := range ds {
		view, n := r.peers(t), 0
		for j, p := range ds {
			if p == r {
				continue
			}
			served, applied := l.served(p), int(view[p.nodeID(t)].Hits)
			if applied > served {
				t.Errorf("node %d applied %d hits from node %d, which served %d", i+1, applied, j+1, served)
			}
			n += served - applied
		}
		worst, sum = max(worst, n), sum+n
	}
	return worst, sum
}

// tap listens to the cluster's group from the test's own address on the
// bridge, and sends to it: the network seen and reached by a stranger.
type tap struct {
	tr *transport.MulticastTransport
}

func newTap(t *testing.T) *tap {
	t.Helper()
	tr, err := transport.ListenMulticast(transport.MulticastConfig{Group: lanGroup, Interface: lanBridge, TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &tap{tr}
}

// capture returns the first datagram heard that decodes under key and
// satisfies match.
func (tp *tap) capture(t *testing.T, key []byte, match func(p transport.Packet, m wire.Message) bool) (transport.Packet, wire.Message) {
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

// send sends b to the group from the test's address.
func (tp *tap) send(t *testing.T, b []byte) {
	t.Helper()
	if err := tp.tr.Send(b); err != nil {
		t.Fatal(err)
	}
}

// relay passes on every datagram from the host at address from to the group, in
// swapped pairs (the second, then the first), until the test ends, and
// returns how many pairs it swapped so far.
func (tp *tap) relay(from string) *atomic.Int64 {
	swapped := new(atomic.Int64)
	go func() {
		var held []byte
		for p := range tp.tr.Packets() {
			if host, _, _ := net.SplitHostPort(p.From); host != from {
				continue // our own copies come back from lanTest
			}
			if held == nil {
				held = p.Data
				continue
			}
			tp.tr.Send(p.Data)
			tp.tr.Send(held)
			held = nil
			swapped.Add(1)
		}
	}()
	return swapped
}

// TestMultiHost checks the multi-host cluster itself: each node alone in
// its namespace with its own address, the bridge flooding multicast, the
// nodes hearing each other from their own addresses, and a tag spent on
// one refused on the others once reported.
func TestMultiHost(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := newLAN(t, 3)
	for _, h := range l.hosts {
		h.ns.Do(func() error {
			ifs, err := net.Interfaces()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ifi := range ifs {
				names = append(names, ifi.Name)
			}
			if got, want := strings.Join(names, " "), "lo "+h.link; got != want {
				t.Errorf("interfaces in host %d's namespace: %s, want %s", h.n, got, want)
			}
			return nil
		})
	}
	out, err := exec.Command(netns.Tool(t, "ip"), "-d", "link", "show", lanBridge).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mcast_snooping 0") {
		t.Fatalf("bridge: %v %s; want mcast_snooping 0", err, out)
	}

	c := faultPolicy
	c.policies = "[[policy]]\nname = \"probe\"\nprefix = \"probe:\"\nrate = 0.001\nburst = 5\n"
	ds := l.startAll(t, c)
	for i, d := range ds {
		for j, h := range l.hosts {
			if i == j {
				continue
			}
			// Reports leave from a socket of their own (its port free, not
			// the group's), so that answers to them reach that daemon alone.
			p, ok := d.peers(t)[ds[j].nodeID(t)]
			host, port, _ := net.SplitHostPort(p.Addr)
			if !ok || host != h.addr || port == "7777" || !p.Match {
				t.Errorf("node %d's view of node %d: %+v (present %v), want it heard from %s, from a port of its own, with matching policies", i+1, j+1, p, ok, h.addr)
			}
		}
	}
	if got := pipeline(t, ds[0].sock, strings.Repeat("probe:x\n", 6)); got != strings.Repeat("OK\n", 5)+"NO\n" {
		t.Fatalf("spending probe:x on node 1: %q", got)
	}
	for i, d := range ds[1:] {
		poll(t, 5*time.Second, fmt.Sprintf("node %d to apply node 1's report", i+2), func() bool {
			return d.tag(t, "probe:x").Tokens < 1
		})
		if ask(t, d.sock, "probe:x") {
			t.Errorf("node %d served probe:x, spent on node 1", i+2)
		}
	}
	if c0 := totals(t, ds[0]); c0["received"] == 0 || c0["own"] == 0 || c0["lost"] != 0 || c0["duplicate"] != 0 {
		t.Errorf("node 1 counters: %v; want datagrams received and its own heard back, none lost or duplicated", c0)
	}
}
