package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/logtest"
)

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

// TestUnicastResolve follows a peer name through failures and changes:
// errors are logged once each and the last good address is kept.
func TestUnicastResolve(t *testing.T) {
	b := listenLocal(t, nil)
	port := b.LocalAddr().(*net.UDPAddr).Port
	rec := &logtest.Recorder{}
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
		if got := rec.Count("cannot resolve peer"); got != s.warned {
			t.Errorf("step %d: %d resolution warnings, want %d", i, got, s.warned)
		}
		if got := rec.Count("peer address changed"); got != s.changed {
			t.Errorf("step %d: %d address changes logged, want %d", i, got, s.changed)
		}
	}
	if got := rec.Count("peer resolves again"); got != 1 {
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

// TestResolveSeveralAddresses: a name that resolves to three addresses
// (a headless service) is sent to at all three.
func TestResolveSeveralAddresses(t *testing.T) {
	first := listenLocal(t, nil)
	port := first.LocalAddr().(*net.UDPAddr).Port
	listeners := []*UnicastTransport{first}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		tr, err := ListenUnicast(UnicastConfig{Bind: fmt.Sprintf("%s:%d", ip, port)})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		listeners = append(listeners, tr)
	}
	f := &fakeLookup{}
	f.set(nil, "127.0.0.1", "::1", "127.0.0.2", "127.0.0.3", "127.0.0.2")
	a, err := listenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Peers: []string{fmt.Sprintf("b.test:%d", port)}, Resolve: time.Hour}, f.lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.2:%d", port), fmt.Sprintf("127.0.0.3:%d", port)}
	if got := dests(a); !slices.Equal(got, want) {
		t.Fatalf("sending to %v, want %v (every IPv4 address, once)", got, want)
	}
	if err := a.Send([]byte("to all")); err != nil {
		t.Fatal(err)
	}
	for i, l := range listeners {
		if p := receive(t, l.Packets()); string(p.Data) != "to all" {
			t.Errorf("address %d received %q", i+1, p.Data)
		}
	}
	if got := a.Found(want[1]); got != FoundResolved {
		t.Errorf("Found(%s) = %q, want %q", want[1], got, FoundResolved)
	}
}
