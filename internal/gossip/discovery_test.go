package gossip

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

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
	trs := make([]*transport.UnicastTransport, 4)
	nodes := make([]*Node, 4)
	for i := range trs {
		tr, err := transport.ListenUnicast(transport.UnicastConfig{Bind: addrs[i], Peers: peersOf[i]})
		if err != nil {
			t.Fatal(err)
		}
		max := 0
		if key != nil {
			max = 10
		}
		tr.SetLearning(max) // the node gives it its silence timeout
		n, err := newNode(Config{Interval: interval, Key: key, Discovery: tr,
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
	sendsTo := func(i int, want []string) bool { return len(sentTo(trs[i], want)) == len(want) }
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
			t.Fatalf("learned without a key: node 4 sends to %v, node 1 to %v", sentTo(trs[3], addrs), sentTo(trs[0], addrs))
		}
		return
	}
	testkit.WaitFor(t, 40*interval, "every node to send to every other", all)
	if got := trs[0].Found(addrs[3]); got != transport.FoundLearned {
		t.Errorf("node 1 found node 4 %q, want learned", got)
	}
	stop(3)
	testkit.WaitFor(t, 4*SilentAfter(interval), "node 4 to be forgotten", func() bool {
		for i := range 3 {
			if trs[i].Found(addrs[3]) != "" {
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

// sentTo returns those of addrs that tr sends to: the ones it found,
// configured, resolved or learned.
func sentTo(tr *transport.UnicastTransport, addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if tr.Found(a) != "" {
			out = append(out, a)
		}
	}
	return out
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
	n, err := newNode(Config{Interval: time.Second, Discovery: rec,
		Drain: func(dst []Hit) []Hit { return dst }, Apply: func(time.Time, []Hit) {}},
		transport.NewMemNetwork(transport.MemConfig{}, nil).Join("a"))
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
