package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
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

// dests returns the addresses tr sends to, in order.
func dests(tr *UnicastTransport) []string {
	var s []string
	for _, d := range *tr.dests.Load() {
		s = append(s, d.String())
	}
	return s
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
		testkit.WaitFor(t, udpWait, fmt.Sprintf("%d datagrams received", udpChanBuffer), func() bool {
			return len(a.Packets()) >= udpChanBuffer
		})
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
		if err := testkit.Recv(t, closed, udpWait, "Close while the receive loop waits on a full channel"); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, a.Packets())
	}
}
