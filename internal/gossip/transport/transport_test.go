package transport

import (
	"errors"
	"net"
	"slices"
	"testing"
)

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
