package daemon

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/logtest"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// This file owns the harness of the fake-time cluster tests: whole
// daemons in one process, inside a testing/synctest bubble, gossiping
// over in-memory networks that deliver on the bubble's clock
// (MemNetwork.DeliverOnTime) and answering the line protocol on
// in-memory listeners (testkit.Listener). Every timer, ticker and time.Now of a daemon is
// then the bubble's: a minute of reports takes what the code takes to
// run, and nothing depends on how busy the machine is.

// fakeNode is one daemon of a fakeCluster, with one connection of the
// line protocol open to it.
type fakeNode struct {
	*Daemon
	name string
	spec fakeSpec // what started it, to start it again
	ev   *events
	logs *logtest.Buffer         // its log, at level info
	tr   *transport.MemTransport // its gossip transport, nil without spec.net
	l    *testkit.Listener
	conn net.Conn
	rd   *bufio.Reader
	stop func()
}

// ask sends tag on the node's connection and reports whether it was
// served.
func (n *fakeNode) ask(t testing.TB, tag string) bool {
	t.Helper()
	if _, err := n.conn.Write([]byte(tag + "\n")); err != nil {
		t.Fatalf("%s: asking %q: %v", n.name, tag, err)
	}
	line, err := n.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: reading the answer to %q: %v", n.name, tag, err)
	}
	switch line {
	case "OK\n":
		return true
	case "NO\n":
		return false
	}
	t.Fatalf("%s: answer %q to %q", n.name, line, tag)
	return false
}

// fakeSpec says how to start one daemon of a fake cluster: its name on
// the networks, its configuration (TOML, without [listen]), the network
// its gossip joins, and, on a relay, the network its link joins; wrap,
// when set, stands between the daemon and its transport on net (to
// filter or reorder what it receives); opts, when set, changes the
// daemon's Options last (a logger, transports of its own).
type fakeSpec struct {
	name string
	text string
	net  *transport.MemNetwork
	link *transport.MemNetwork
	wrap func(*transport.MemTransport) transport.Transport
	opts func(*Options)
}

// startFake starts a daemon as spec says, inside the caller's bubble;
// it stops at the test's end, or when its stop is called.
func startFake(t *testing.T, spec fakeSpec) *fakeNode {
	t.Helper()
	path, cfg := writeConfig(t, t.TempDir(), "", spec.text)
	n := &fakeNode{name: spec.name, spec: spec, ev: newEvents(), logs: &logtest.Buffer{}, l: testkit.NewListener()}
	opts := Options{Config: cfg, Path: path, OnEvent: n.ev.hook, Version: "test", Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
		Listeners: []NamedListener{{Listener: n.l, Name: spec.name}}}
	if spec.net != nil {
		opts.Transports = func(config.Gossip) (transport.Transport, error) {
			n.tr = spec.net.Join(spec.name)
			if spec.wrap != nil {
				return spec.wrap(n.tr), nil
			}
			return n.tr, nil
		}
	}
	if spec.link != nil {
		opts.RelayLink = func(config.Relay) (transport.Transport, error) { return spec.link.Join(spec.name), nil }
	}
	if spec.opts != nil {
		spec.opts(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("%s: %v", spec.name, err)
	}
	n.Daemon = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			if n.conn != nil {
				n.conn.Close()
			}
			cancel()
			<-done
			d.Close(time.Second)
		})
	}
	t.Cleanup(n.stop)
	n.ev.wait(t, Started, 0)
	if n.conn, err = n.l.Dial(); err != nil {
		t.Fatal(err)
	}
	n.rd = bufio.NewReader(n.conn)
	return n
}

// fakeConfig is a node's configuration: a limit of rate and burst,
// gossip every interval, to a multicast group when group is set, else
// to unicast peers (the transports are in memory either way: the key
// says which the daemon believes it has), and more as it is.
func fakeConfig(rate float64, burst int, interval time.Duration, group bool, more string) string {
	to := "peers = [\"mem:1\"]"
	if group {
		to = "group = \"239.255.77.77:7777\""
	}
	return fmt.Sprintf("[limit]\nrate = %g\nburst = %d\n[gossip]\n%s\ninterval = %q\n%s", rate, burst, to, interval, strings.TrimLeft(more, "\n"))
}

// fakeCluster is the daemons of one fake-time run.
type fakeCluster []*fakeNode

// startCluster starts a daemon for each spec, one after the other a
// fraction of interval apart, as real daemons start at times of their
// own: their report ticks then fall at instants of their own too.
func startCluster(t *testing.T, interval time.Duration, specs []fakeSpec) fakeCluster {
	t.Helper()
	var c fakeCluster
	for i, s := range specs {
		if i > 0 {
			time.Sleep(interval * 37 / 100 / time.Duration(len(specs)))
		}
		c = append(c, startFake(t, s))
	}
	return c
}

// awaitPeers lets within pass and fails t unless every node of c then
// hears n peers.
func (c fakeCluster) awaitPeers(t *testing.T, n int, within time.Duration) {
	t.Helper()
	time.Sleep(within)
	for _, node := range c {
		if got := len(node.peers()); got != n {
			t.Fatalf("%s hears %d peers %v after the cluster started, want %d", node.name, got, within, n)
		}
	}
}

// id is the node's gossip id.
func (n *fakeNode) id() uint64 { return n.gossip.node.ID() }

// counters sums the gossip counters of the nodes.
func (c fakeCluster) counters() gossipCounters {
	var g gossipCounters
	for _, n := range c {
		st := n.gossip.node.Stats()
		g.Lost += st.Lost
		g.Requests += st.Repair.Requests
		g.Asked += st.Repair.Asked
		g.Repaired += st.Repair.Repaired
		g.Resent += st.Repair.Resent
		g.Gone += st.Repair.Gone
		g.Bytes += st.BytesSent
		g.Duplicate += st.DroppedDuplicate
	}
	return g
}

// gossipCounters are the gossip counters the cluster tests read, over
// some nodes.
type gossipCounters struct {
	Lost, Requests, Asked, Repaired, Resent, Gone, Bytes, Duplicate uint64
}

func (g gossipCounters) String() string {
	return fmt.Sprintf("lost %d, requests %d, asked %d, repaired %d, resent %d, gone %d, bytes %d, duplicates %d",
		g.Lost, g.Requests, g.Asked, g.Repaired, g.Resent, g.Gone, g.Bytes, g.Duplicate)
}

// missed is how many of the hits each node of c served another never
// applied: it returns the most any one receiver missed and the sum over
// all, and fails t if a node applied more of a peer's hits than the peer
// served. Call it once every report has arrived.
func (c fakeCluster) missed(t *testing.T, l *fakeLoad) (worst, sum int) {
	t.Helper()
	for _, r := range c {
		view := map[uint64]uint64{}
		for _, p := range r.peers() {
			view[p.Node] = p.Hits
		}
		n := 0
		for j, p := range c {
			if p == r {
				continue
			}
			served, applied := l.served(j), int(view[p.id()])
			if applied > served {
				t.Errorf("%s applied %d hits from %s, which served %d", r.name, applied, p.name, served)
			}
			n += served - applied
		}
		worst, sum = max(worst, n), sum+n
	}
	return worst, sum
}

// fakeLoad is a load's record: the instants each node of its cluster
// served a query at.
type fakeLoad struct {
	start, end time.Time
	ok         [][]time.Time // per node of the cluster, in order
	asked      int
}

// runLoad hammers tag on the nodes of c in turn, perSecond queries a
// second, for dur, and returns its record. A node for which down
// reports true (down may be nil) is skipped at its turn.
func runLoad(t *testing.T, c fakeCluster, tag string, dur time.Duration, perSecond int, down func(i int) bool) *fakeLoad {
	t.Helper()
	l := &fakeLoad{start: time.Now(), ok: make([][]time.Time, len(c))}
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for i := 0; time.Since(l.start) < dur; i++ {
		<-tick.C
		k := i % len(c)
		if down != nil && down(k) {
			continue
		}
		l.asked++
		if c[k].ask(t, tag) {
			l.ok[k] = append(l.ok[k], time.Now())
		}
		l.end = time.Now()
	}
	return l
}

// served is how many queries the load's nodes were served, over the
// nodes given by index, or all.
func (l *fakeLoad) served(nodes ...int) int {
	if len(nodes) == 0 {
		for i := range l.ok {
			nodes = append(nodes, i)
		}
	}
	n := 0
	for _, i := range nodes {
		n += len(l.ok[i])
	}
	return n
}

// most is the most served in any window of length w.
func (l *fakeLoad) most(w time.Duration) int { return l.mostIn(w) }

// duration is from the load's start to its last reply.
func (l *fakeLoad) duration() time.Duration { return l.end.Sub(l.start) }

// clusterBound is the cluster bound's most that n nodes with burst b and
// rate r, reporting every interval with delivery delay d, serve a tag over
// a window w: b + r*w + (n-1)*(b + r*(I+d)) (docs/design.md, The cluster
// bound).
func clusterBound(n int, rate float64, burst int, interval, d, w time.Duration) float64 {
	b := float64(burst)
	return b + rate*w.Seconds() + float64(n-1)*(b+rate*(interval+d).Seconds())
}
