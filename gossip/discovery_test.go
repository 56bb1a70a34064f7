package gossip

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
)

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

func TestLearningRules(t *testing.T) {
	a := listenLocal(t, nil)
	port := a.LocalAddr().(*net.UDPAddr).Port
	now := time.Unix(1e9, 0)
	a.Heard("10.0.0.1:7777", now)
	if got := a.DiscoveryStats(); got.Learned != 0 {
		t.Fatalf("learned %d peers before SetLearning (learning is off)", got.Learned)
	}
	a.SetLearning(2)
	a.SilentAfter(time.Second)
	a.Heard("10.0.0.1:7777", now)
	a.Told("10.0.0.2:7777", now)
	a.Heard("10.0.0.3:7777", now) // over max_peers
	a.Heard("0.0.0.0:7777", now)  // never an address to send to
	a.Heard(fmt.Sprintf("127.0.0.1:%d", port), now)
	a.Self(fmt.Sprintf("127.0.0.1:%d", port))
	st := a.DiscoveryStats()
	if st.Learned != 2 || st.Added != 2 || st.Refused != 2 {
		t.Fatalf("after learning: %+v; want 2 learned and added, 2 refused (max_peers reached)", st)
	}
	if got, want := dests(a), []string{"10.0.0.1:7777", "10.0.0.2:7777"}; !slices.Equal(got, want) {
		t.Fatalf("sending to %v, want %v", got, want)
	}
	if ads, _ := a.Advert(now); len(ads) != 1 || ads[0] != "10.0.0.1:7777" {
		t.Fatalf("advertising %v: want only the peer heard from itself", ads)
	}
	if a.Found("10.0.0.2:7777") != FoundLearned || a.Found("10.0.0.9:7777") != "" {
		t.Fatal("Found does not tell learned peers from others")
	}
	// Heard again keeps a peer; one only told of is forgotten once silent.
	a.Heard("10.0.0.1:7777", now.Add(900*time.Millisecond))
	a.Heard("10.0.0.1:7777", now.Add(1500*time.Millisecond))
	if got, want := dests(a), []string{"10.0.0.1:7777"}; !slices.Equal(got, want) {
		t.Fatalf("after the silence timeout, sending to %v, want %v", got, want)
	}
	a.SetLearning(0)
	if st := a.DiscoveryStats(); st.Learned != 0 || st.Forgotten != 2 {
		t.Fatalf("after turning learning off: %+v", st)
	}
	if got := dests(a); len(got) != 0 {
		t.Fatalf("sending to %v with learning off", got)
	}
}

// TestJoinThroughOneSeed runs four nodes over UDP inside a namespace of
// its own: three that know each other, and a fourth that knows only the
// first. Within a few intervals all four send to one another; stopped, the
// fourth is forgotten after the silence timeout. Without a key nothing is
// learned.
func TestJoinThroughOneSeed(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	for _, key := range [][]byte{[]byte("the cluster's secret, 32 bytes.."), nil} {
		t.Run(fmt.Sprintf("key=%v", key != nil), func(t *testing.T) { joinThroughOneSeed(t, key) })
	}
}

func joinThroughOneSeed(t *testing.T, key []byte) {
	const interval = 50 * time.Millisecond
	addrs := []string{"127.0.0.1:17001", "127.0.0.1:17002", "127.0.0.1:17003", "127.0.0.1:17004"}
	peersOf := [][]string{addrs[1:3], {addrs[0], addrs[2]}, addrs[:2], addrs[:1]}
	trs := make([]*UnicastTransport, 4)
	nodes := make([]*Node, 4)
	for i := range trs {
		tr, err := ListenUnicast(UnicastConfig{Bind: addrs[i], Peers: peersOf[i]})
		if err != nil {
			t.Fatal(err)
		}
		max := 0
		if key != nil {
			max = 10
		}
		tr.SetLearning(max) // the node gives it its silence timeout
		n, err := NewNode(Config{Interval: interval, Key: key, Discovery: tr,
			Drain: func(dst []Hit) []Hit { return dst }, Apply: func(time.Time, []Hit) {}}, tr)
		if err != nil {
			t.Fatal(err)
		}
		n.Start()
		trs[i], nodes[i] = tr, n
	}
	stop := func(i int) {
		if trs[i] != nil {
			nodes[i].Stop(context.Background())
			trs[i].Close()
			trs[i] = nil
		}
	}
	defer func() {
		for i := range trs {
			stop(i)
		}
	}()
	sendsTo := func(i int, want []string) bool {
		got := dests(trs[i])
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	}
	all := func() bool {
		for i := range trs {
			others := slices.Delete(slices.Clone(addrs), i, i+1)
			if !sendsTo(i, others) {
				return false
			}
		}
		return true
	}
	if key == nil {
		time.Sleep(10 * interval) // a window in which nothing may be learned
		if all() || trs[3].DiscoveryStats().Learned != 0 || trs[0].DiscoveryStats().Learned != 0 {
			t.Fatalf("learned without a key: node 4 sends to %v, node 1 to %v", dests(trs[3]), dests(trs[0]))
		}
		return
	}
	waitFor(t, 40*interval, "every node to send to every other", all)
	if got := trs[0].Found(addrs[3]); got != FoundLearned {
		t.Errorf("node 1 found node 4 %q, want learned", got)
	}
	stop(3)
	waitFor(t, 4*SilentAfter(interval), "node 4 to be forgotten", func() bool {
		for i := range 3 {
			if slices.Contains(dests(trs[i]), addrs[3]) {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		if st := trs[i].DiscoveryStats(); st.Forgotten == 0 {
			t.Errorf("node %d: %+v, want node 4 counted as forgotten", i+1, st)
		}
	}
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// silenceRecorder is a Discovery that records the silence timeouts the
// node gives it.
type silenceRecorder struct {
	Discovery // nil: only SilentAfter is called here
	got       []time.Duration
}

func (s *silenceRecorder) SilentAfter(d time.Duration) { s.got = append(s.got, d) }

// TestNodeGivesDiscoveryItsSilence: the node, which derives the silence
// timeout from its interval, gives it to its discovery at start and at
// every update, so nobody else derives it.
func TestNodeGivesDiscoveryItsSilence(t *testing.T) {
	rec := &silenceRecorder{}
	n, err := NewNode(Config{Interval: time.Second, Discovery: rec,
		Drain: func(dst []Hit) []Hit { return dst }, Apply: func(time.Time, []Hit) {}},
		NewMemNetwork(MemConfig{}, nil).Join("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Update(Update{Interval: 5 * time.Second, MaxPacket: 1400}); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{SilentAfter(time.Second), SilentAfter(5 * time.Second)}; !slices.Equal(rec.got, want) {
		t.Fatalf("the discovery was given %v, want %v", rec.got, want)
	}
}
