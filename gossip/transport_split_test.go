package gossip

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
)

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

// TestMulticastReply: a member of a group that answers a datagram to its
// source address reaches the sender alone, even with another member of
// the same group on the same host.
func TestMulticastReply(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const group = "239.255.77.77:7777"
	var ms []*MulticastTransport
	for range 3 {
		m, err := ListenMulticast(MulticastConfig{Group: group, Interface: "lo", TTL: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	asker, answerer, other := ms[0], ms[1], ms[2]
	if err := asker.Send([]byte("ask")); err != nil {
		t.Fatal(err)
	}
	var from string
	for from == "" {
		p := receive(t, answerer.Packets())
		if string(p.Data) == "ask" {
			from = p.From
		}
	}
	if err := answerer.SendTo([]byte("answer"), from); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "asker", asker, "ask", "answer"); len(got) != 0 {
		t.Errorf("asker received %v besides its question and the answer", got)
	}
	// The other member hears the question on the group, never the answer:
	// once its own datagram comes back, the answer would have come first.
	if err := other.Send([]byte("mark")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "ask", "mark"); len(got) != 0 {
		t.Errorf("another member received %v", got)
	}
}
