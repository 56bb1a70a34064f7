package daemon

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestSpecTimelineOnFakeTime is tests/cluster's
// TestSpecTimelineRealDaemons on fake time: the description's A/B
// timeline (docs/protocol.md, The worked example; burst 10, rate 1/s,
// reports every 5 s) against two whole daemons on the defaults, warm
// start included, started 0.3 s apart. Where the real test allows each
// step 150 ms of lateness and a level 0.15 tokens, here every step
// happens at its instant and every level is exact:
//
//   - A starts at T0-1.3 s, B at T0-1 s: A's warm start request found
//     nobody, so A still warms, unanswered, when C's burst comes.
//   - T0, the description's t=0.1 and t=0.2: 11 queries on A, 10 served
//     and the 11th refused; 8 on B, all served.
//   - T0+3.7 s, A's start + 5 s: A reports its 10 hits, and asks for a
//     snapshot again, which B answers. At T0+3.85 s A holds 3.85 tokens
//     (B's 8 hits are not reported yet) and B -4.15 (both nodes' 18).
//   - T0+4 s, B's start + 5 s: B reports. From then on both hold C's
//     global count, -8 at T0 refilled: -3.5 at T0+4.5 s, -2.8 at T0+5.2 s,
//     where both refuse, as the description's t=5.2.
//   - Both refuse 1 ms before T0+9 s, when C's bucket holds a whole token
//     again, and both serve 1 ms after.
//   - Both warm starts ended with one peer's answer: B's from A as it
//     started, A's from B when it asked again; A asked twice, B once.
func TestSpecTimelineOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// In order, as on the loopback of the real test: see rollingDelay.
		mem := transport.NewMemNetwork(transport.MemConfig{Delay: fakeDelay}, nil)
		mem.DeliverOnTime()
		text := fakeConfig(1, 10, 5*time.Second, true, "")
		a := startFake(t, fakeSpec{name: "A", text: text, net: mem})
		t0 := time.Now().Add(1300 * time.Millisecond)
		at := func(off time.Duration) { time.Sleep(time.Until(t0.Add(off))) }
		at(-time.Second)
		b := startFake(t, fakeSpec{name: "B", text: text, net: mem})
		if w := a.WarmStats(); !w.Warming || w.PeersAnswered != 0 || w.RequestsSent != 1 {
			t.Fatalf("A as B starts: warm start %+v, want warming, one request sent and no answer (nobody was up to answer it)", w)
		}

		at(0)
		for i := range 11 {
			if got, want := a.ask(t, "C"), i < 10; got != want {
				t.Fatalf("T0: query %d of C on A answered %v, want %v (10 served, the 11th refused)", i+1, got, want)
			}
		}
		if got := b.askN(t, "C", 8); got != 8 {
			t.Fatalf("T0: B served %d of 8 queries of C, want all", got)
		}

		// A warm answer's levels are merged as of their arrival: the level
		// they lower may miss one delivery's refill, r*d.
		short := fakeDelay.Seconds() // r*d, at 1 token a second
		level := func(step string, off time.Duration, n *fakeNode, want float64) {
			t.Helper()
			at(off)
			if v := n.tagView("C"); v.Tokens > want+1e-9 || v.Tokens < want-short-1e-9 {
				t.Errorf("%s, T0%+v: C on %s holds %.6f tokens, want %.3f less at most %.4f (lower: hits counted twice, higher: hits not counted)", step, off, n.name, v.Tokens, want, short)
			}
		}
		level("A reported, B not yet", 3850*time.Millisecond, a, 3.85)
		level("A reported, B not yet", 3850*time.Millisecond, b, -4.15)
		for _, n := range []*fakeNode{a, b} {
			level("both reported", 4500*time.Millisecond, n, -3.5)
		}
		for _, step := range []struct {
			name string
			off  time.Duration
			want bool
		}{
			{"the description's t=5.2", 5200 * time.Millisecond, false},
			{"0.999 tokens", 9*time.Second - time.Millisecond, false},
			{"1.001 tokens: a whole token again", 9*time.Second + time.Millisecond, true},
		} {
			at(step.off)
			for _, n := range []*fakeNode{a, b} {
				tokens := n.tagView("C").Tokens
				if got := n.ask(t, "C"); got != step.want {
					t.Errorf("%s, T0%+v: %s answered %v with %.6f tokens, want %v", step.name, step.off, n.name, got, tokens, step.want)
				}
			}
		}

		for _, n := range []*fakeNode{a, b} {
			if w := n.WarmStats(); !w.Warm || w.PeersAnswered != 1 {
				t.Errorf("%s's warm start: %+v, want done with one peer's answer", n.name, w)
			}
		}
		if wa, wb := a.WarmStats(), b.WarmStats(); wa.RequestsSent != 2 || wb.RequestsSent != 1 {
			t.Errorf("snapshot requests sent: A %d, B %d; want A's second once B was up, and B's one", wa.RequestsSent, wb.RequestsSent)
		}
	})
}
