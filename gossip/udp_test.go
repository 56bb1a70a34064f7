package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
)

// Unicast tests bind to 127.0.0.1 only. Multicast tests run only inside a
// user and network namespace of their own (netns.Run): never on the host.

const udpWait = 5 * time.Second // deadline for a datagram over lo

// listenLocal opens a unicast transport on 127.0.0.1 with a free port.
func listenLocal(t *testing.T, log *slog.Logger) *UnicastTransport {
	t.Helper()
	tr, err := ListenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// setPeers points tr at the given transports, as if they had been in
// UnicastConfig.Peers: their ports are only known once they are open.
func setPeers(t *testing.T, tr *UnicastTransport, to ...*UnicastTransport) {
	t.Helper()
	var peers []*udpPeer
	for _, o := range to {
		p, err := parsePeer(o.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, p)
	}
	tr.resolveMu.Lock()
	tr.peers = peers
	tr.resolveMu.Unlock()
	tr.resolve()
}

// receive returns the next packet on ch, failing t after udpWait.
func receive(t *testing.T, ch <-chan Packet) Packet {
	t.Helper()
	select {
	case p, ok := <-ch:
		if !ok {
			t.Fatal("Packets closed early")
		}
		return p
	case <-time.After(udpWait):
		t.Fatal("no datagram within", udpWait)
	}
	panic("unreachable")
}

// waitClosed fails t unless ch is closed, after draining it, within udpWait.
func waitClosed(t *testing.T, ch <-chan Packet) {
	t.Helper()
	deadline := time.After(udpWait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Packets not closed after Close")
		}
	}
}

func TestUnicastExchange(t *testing.T) {
	a, b := listenLocal(t, nil), listenLocal(t, nil)
	setPeers(t, a, b)
	setPeers(t, b, a)

	msg := []byte("a long message from a")
	if err := a.Send(msg); err != nil {
		t.Fatal(err)
	}
	if err := a.Send([]byte("x")); err != nil {
		t.Fatal(err)
	}
	copy(msg, "overwritten")
	if err := b.Send([]byte("from b")); err != nil {
		t.Fatal(err)
	}

	p1, p2 := receive(t, b.Packets()), receive(t, b.Packets())
	if string(p1.Data) != "a long message from a" || string(p2.Data) != "x" {
		t.Errorf("b received %q, %q; want the two datagrams from a, each its own copy", p1.Data, p2.Data)
	}
	if cap(p2.Data) != 1 {
		t.Errorf("Data of a 1-byte datagram has capacity %d: the read buffer leaked", cap(p2.Data))
	}
	if want := a.LocalAddr().String(); p1.From != want {
		t.Errorf("From = %q, want %q", p1.From, want)
	}
	if p1.At.IsZero() || time.Since(p1.At) > time.Minute {
		t.Errorf("At = %v, want about now", p1.At)
	}
	if p := receive(t, a.Packets()); string(p.Data) != "from b" || p.From != b.LocalAddr().String() {
		t.Errorf("a received %q from %s, want \"from b\" from %s", p.Data, p.From, b.LocalAddr())
	}
}

// TestUnicastPeersConfig uses the public configuration only: a sends to b
// and to itself.
func TestUnicastPeersConfig(t *testing.T) {
	b := listenLocal(t, nil)
	// Its own address is only known after binding: take a free port, close
	// it, bind it again. Should another process grab it in between, the
	// test reports that rather than passing.
	probe := listenLocal(t, nil)
	self := probe.LocalAddr().String()
	probe.Close()
	a, err := ListenUnicast(UnicastConfig{Bind: self, Peers: []string{b.LocalAddr().String(), self}})
	if err != nil {
		t.Fatalf("rebinding %s: %v", self, err)
	}
	defer a.Close()
	if err := a.Send([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]*UnicastTransport{"peer": b, "self": a} {
		if p := receive(t, tr.Packets()); string(p.Data) != "hi" || p.From != self {
			t.Errorf("%s received %q from %s, want \"hi\" from %s", name, p.Data, p.From, self)
		}
	}
}

func TestUnicastClose(t *testing.T) {
	a := listenLocal(t, nil)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waitClosed(t, a.Packets())
	if err := a.Send([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close = %v, want net.ErrClosed", err)
	}
}

// TestUnicastCloseWhileReceiving closes a transport nobody reads while
// datagrams keep arriving: Close must not hang on the full channel, and
// nothing may be sent on the channel after it is closed.
func TestUnicastCloseWhileReceiving(t *testing.T) {
	for range 20 {
		// Not listenLocal: its cleanup would wait on a hung Close.
		a, err := ListenUnicast(UnicastConfig{Bind: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		peer := listenLocal(t, nil)
		setPeers(t, peer, a)
		for range udpChanBuffer + 50 { // fill the channel; the rest waits in the socket
			if err := peer.Send([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until the receive loop is blocked on the full channel.
		deadline := time.Now().Add(udpWait)
		for len(a.Packets()) < udpChanBuffer {
			if time.Now().After(deadline) {
				t.Fatalf("only %d datagrams received within %v", len(a.Packets()), udpWait)
			}
			time.Sleep(time.Millisecond) // polling with a deadline
		}
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(udpWait):
			t.Fatal("Close hung while the receive loop waited on a full channel")
		}
		waitClosed(t, a.Packets())
	}
}

func TestUnicastConfigErrors(t *testing.T) {
	for _, cfg := range []UnicastConfig{
		{Bind: "127.0.0.1:0", Peers: []string{"no-port"}},
		{Bind: "127.0.0.1:0", Peers: []string{":7777"}},
		{Bind: "127.0.0.1:0", Peers: []string{"127.0.0.1:0"}},
		{Bind: "127.0.0.1:0", Peers: []string{"127.0.0.1:http"}},
		{Bind: "127.0.0.1:0", Resolve: -time.Second},
		{Bind: "127.0.0.1:bad"},
	} {
		if tr, err := ListenUnicast(cfg); err == nil {
			tr.Close()
			t.Errorf("ListenUnicast(%+v) succeeded, want an error", cfg)
		} else if !strings.HasPrefix(err.Error(), "gossip: ") {
			t.Errorf("error %q does not name the package", err)
		}
	}
}

// logRecorder is a slog.Handler keeping the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// fakeLookup answers name lookups from a table the test changes.
type fakeLookup struct {
	mu    sync.Mutex
	addrs []netip.Addr
	err   error
	calls atomic.Int64
}

func (f *fakeLookup) set(err error, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.addrs = err, nil
	for _, a := range addrs {
		f.addrs = append(f.addrs, netip.MustParseAddr(a))
	}
}

func (f *fakeLookup) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if host != "b.test" {
		return nil, fmt.Errorf("unexpected lookup of %q", host)
	}
	return f.addrs, f.err
}

func dests(tr *UnicastTransport) []string {
	var s []string
	for _, d := range *tr.dests.Load() {
		s = append(s, d.String())
	}
	return s
}

// TestUnicastResolve follows a peer name through failures and changes:
// errors are logged once each and the last good address is kept.
func TestUnicastResolve(t *testing.T) {
	b := listenLocal(t, nil)
	port := b.LocalAddr().(*net.UDPAddr).Port
	rec := &logRecorder{}
	f := &fakeLookup{}
	f.set(nil, "::1", "127.0.0.1") // IPv4 preferred: the socket is IPv4
	a, err := listenUnicast(UnicastConfig{
		Bind:    "127.0.0.1:0",
		Peers:   []string{fmt.Sprintf("b.test:%d", port)},
		Resolve: time.Hour, // the test calls resolve itself
		Logger:  slog.New(rec),
	}, f.lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := []string{fmt.Sprintf("127.0.0.1:%d", port)}
	if got := dests(a); !slices.Equal(got, want) {
		t.Fatalf("after start, sending to %v, want %v", got, want)
	}

	type step struct {
		err             error
		addrs           []string
		want            []string // addresses sent to afterwards
		warned, changed int      // log lines so far
	}
	other := fmt.Sprintf("127.0.0.9:%d", port)
	for i, s := range []step{
		{errors.New("server misbehaving"), nil, want, 1, 0},
		{errors.New("server misbehaving"), nil, want, 1, 0}, // same error: not logged again
		{nil, nil, want, 2, 0},                              // no addresses is an error too
		{errors.New("timeout"), nil, want, 3, 0},
		{nil, []string{"127.0.0.1"}, want, 3, 0}, // recovers, logged as such
		{nil, []string{"127.0.0.9"}, []string{other}, 3, 1},
		{nil, []string{"127.0.0.9"}, []string{other}, 3, 1},
	} {
		f.set(s.err, s.addrs...)
		a.resolve()
		if got := dests(a); !slices.Equal(got, s.want) {
			t.Errorf("step %d: sending to %v, want %v", i, got, s.want)
		}
		if got := rec.count("cannot resolve peer"); got != s.warned {
			t.Errorf("step %d: %d resolution warnings, want %d", i, got, s.warned)
		}
		if got := rec.count("peer address changed"); got != s.changed {
			t.Errorf("step %d: %d address changes logged, want %d", i, got, s.changed)
		}
	}
	if got := rec.count("peer resolves again"); got != 1 {
		t.Errorf("%d recoveries logged, want 1", got)
	}

	// While a name fails, datagrams still reach the previous address.
	f.set(nil, "127.0.0.1")
	a.resolve()
	f.set(errors.New("down"))
	a.resolve()
	if err := a.Send([]byte("still")); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, b.Packets()); string(p.Data) != "still" {
		t.Errorf("b received %q, want \"still\"", p.Data)
	}
}

// TestUnicastResolveEvery checks names are looked up again in the
// background, and not after Close.
func TestUnicastResolveEvery(t *testing.T) {
	f := &fakeLookup{}
	f.set(nil, "127.0.0.1")
	var closed atomic.Bool
	late := make(chan struct{}, 1)
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		if closed.Load() {
			select {
			case late <- struct{}{}:
			default:
			}
		}
		return f.lookup(ctx, host)
	}
	a, err := listenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Peers: []string{"b.test:9"}, Resolve: time.Millisecond}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(udpWait)
	for f.calls.Load() < 5 {
		if time.Now().After(deadline) {
			a.Close()
			t.Fatalf("%d lookups within %v, want 5 with Resolve = 1ms", f.calls.Load(), udpWait)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	a.Close()
	closed.Store(true)
	select {
	case <-late:
		t.Error("lookup after Close returned")
	default:
	}
}

// TestUnicastMulti combines two unicast transports: Send goes out of both,
// Packets merges what both receive, Close closes both.
func TestUnicastMulti(t *testing.T) {
	x, y, peer := listenLocal(t, nil), listenLocal(t, nil), listenLocal(t, nil)
	setPeers(t, x, peer)
	setPeers(t, y, peer)
	setPeers(t, peer, x, y)
	m := Multi(x, y)

	if err := m.Send([]byte("both")); err != nil {
		t.Fatal(err)
	}
	from := []string{receive(t, peer.Packets()).From, receive(t, peer.Packets()).From}
	slices.Sort(from)
	want := []string{x.LocalAddr().String(), y.LocalAddr().String()}
	slices.Sort(want)
	if !slices.Equal(from, want) {
		t.Errorf("peer heard from %v, want %v", from, want)
	}

	if err := peer.Send([]byte("to both")); err != nil {
		t.Fatal(err)
	}
	got := []string{receive(t, m.Packets()).From, receive(t, m.Packets()).From}
	if got[0] != peer.LocalAddr().String() || got[1] != got[0] {
		t.Errorf("merged Packets gave datagrams from %v, want two from %s", got, peer.LocalAddr())
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waitClosed(t, m.Packets())
	waitClosed(t, x.Packets())
	waitClosed(t, y.Packets())
	if err := m.Send([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close = %v, want net.ErrClosed", err)
	}
}

func TestMulticastConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  MulticastConfig
		want string
	}{
		{MulticastConfig{Group: "[ff02::1]:7777"}, "only IPv4"},
		{MulticastConfig{Group: "10.0.0.1:7777"}, "not a multicast address"},
		{MulticastConfig{Group: "239.255.77.77"}, "address:port"},
		{MulticastConfig{Group: "239.255.77.77:0"}, "port"},
		{MulticastConfig{Group: "239.255.77.77:7777", TTL: 256}, "ttl"},
		{MulticastConfig{Group: "239.255.77.77:7777", TTL: -1}, "ttl"},
		{MulticastConfig{Group: "239.255.77.77:7777", Interface: "no-such-if0"}, "no-such-if0"},
	} {
		// Each fails before a socket is opened: nothing is sent or joined.
		tr, err := ListenMulticast(c.cfg)
		if err == nil {
			tr.Close()
			t.Fatalf("ListenMulticast(%+v) succeeded, want an error", c.cfg)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "gossip: ") {
			t.Errorf("ListenMulticast(%+v) = %q, want a gossip error mentioning %q", c.cfg, err, c.want)
		}
	}
}

// TestMulticast runs in a namespace of its own: three transports joined to
// one group on lo hear each other and themselves; a transport on another
// group with the same port hears none of it, nor they it, and unicast to
// the port reaches none of them.
func TestMulticast(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const group, otherGroup = "239.255.77.77:7777", "239.255.77.78:7777"
	var members []*MulticastTransport
	for _, ifname := range []string{"", "", "lo"} {
		m, err := ListenMulticast(MulticastConfig{Group: group, Interface: ifname, TTL: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := m.LocalAddr().String(); got != group {
			t.Errorf("bound to %s, want the group's own address %s", got, group)
		}
		members = append(members, m)
	}
	other, err := ListenMulticast(MulticastConfig{Group: otherGroup, TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// The other group first: once it hears itself, its datagram has been
	// delivered to every socket it will ever reach, so a member that got
	// it would read it before the members' own datagrams below.
	if err := other.Send([]byte("other-1")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "other-1"); len(got) != 0 {
		t.Errorf("other group received %v", got)
	}
	// Unicast to the group's port on lo, likewise before the members send.
	uni, err := ListenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Peers: []string{"127.0.0.1:7777"}})
	if err != nil {
		t.Fatal(err)
	}
	defer uni.Close()
	if err := uni.Send([]byte("unicast")); err != nil {
		t.Fatal(err)
	}

	want := make([]string, len(members))
	for i, m := range members {
		want[i] = fmt.Sprintf("member-%d", i)
		if err := m.Send([]byte(want[i])); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range members {
		if got := collect(t, fmt.Sprintf("member %d", i), m, want...); len(got) != 0 {
			t.Errorf("member %d received %v from outside its group", i, got)
		}
	}

	// The members' datagrams have all been delivered by now; one the other
	// group wrongly received would come before this one.
	if err := other.Send([]byte("other-2")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "other-2"); len(got) != 0 {
		t.Errorf("other group received %v from the first group", got)
	}
}

// collect reads tr's packets until every one of want has arrived, and
// returns the unexpected payloads read meanwhile. Duplicates of a wanted
// payload are logged, not returned.
func collect(t *testing.T, name string, tr Transport, want ...string) (unexpected []string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	seen := map[string]int{}
	deadline := time.After(udpWait)
	for len(missing) > 0 {
		select {
		case p, ok := <-tr.Packets():
			if !ok {
				t.Fatalf("%s: Packets closed", name)
			}
			s := string(p.Data)
			switch {
			case missing[s]:
				delete(missing, s)
			case seen[s] > 0:
				t.Logf("%s: duplicate %q from %s", name, s, p.From)
			default:
				unexpected = append(unexpected, s)
			}
			seen[s]++
		case <-deadline:
			t.Fatalf("%s: still missing %v after %v (got %v)", name, keys(missing), udpWait, seen)
		}
	}
	return unexpected
}

func keys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
