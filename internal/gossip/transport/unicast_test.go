package transport

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

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
		} else if !strings.HasPrefix(err.Error(), "transport: ") {
			t.Errorf("error %q does not name the package", err)
		}
	}
}

// TestUnicastSetPeersByName gives a running unicast transport, started
// with no peers, a peer by name, as a reload does: the name is looked up
// through the transport's resolver and reports reach the address.
func TestUnicastSetPeersByName(t *testing.T) {
	b := listenLocal(t, nil)
	f := &fakeLookup{}
	f.set(nil, "127.0.0.1")
	a, err := listenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Resolve: time.Hour}, f.lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := dests(a); len(got) != 0 {
		t.Fatalf("sending to %v before any peer", got)
	}
	port := b.LocalAddr().(*net.UDPAddr).Port
	if err := a.SetPeers([]string{fmt.Sprintf("b.test:%d", port)}); err != nil {
		t.Fatal(err)
	}
	if want := []string{fmt.Sprintf("127.0.0.1:%d", port)}; !slices.Equal(dests(a), want) {
		t.Fatalf("after SetPeers by name, sending to %v, want %v", dests(a), want)
	}
	if f.calls.Load() == 0 {
		t.Fatal("the name was not looked up")
	}
	if err := a.Send([]byte("by name")); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, b.Packets()); string(p.Data) != "by name" {
		t.Fatalf("peer received %q", p.Data)
	}
	if err := a.SetPeers([]string{"b.test"}); err == nil {
		t.Fatal("SetPeers accepted a peer without a port")
	}
	if want := []string{fmt.Sprintf("127.0.0.1:%d", port)}; !slices.Equal(dests(a), want) {
		t.Fatalf("a rejected SetPeers changed the peers to %v", dests(a))
	}
}
