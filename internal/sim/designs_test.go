package sim

import (
	"math"
	"testing"
	"time"
)

// TestBound: each design's bound, for burst 20, rate 10, interval 1 s,
// d = 20 ms, N = 10, θ = 10, A = 2 s, over a 10 s window.
func TestBound(t *testing.T) {
	for _, tc := range []struct {
		design string
		want   float64
	}{
		{"today", 20 + 100 + 9*(20+10*1.02)},
		{"holdback", 20 + 100 + 9*(20+10*1.02+9)},
		{"relay", 20 + 100 + 9*(20+10*2.06)},
		{"relay-hold", 20 + 100 + 9*(20+10*2.06+18) + 9*(1+10.0/2)},
	} {
		c := Default(10)
		c.Design = tc.design
		if got := Bound(c, 10*time.Second); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: bound %.3f, want %.3f", tc.design, got, tc.want)
		}
	}
	c := Default(10)
	if c.threshold() != 10 || c.holdAge() != 2*time.Second {
		t.Errorf("threshold %d, hold age %v: want 10 and 2s", c.threshold(), c.holdAge())
	}
	c.Hold, c.Burst, c.Rate = 0.01, 3, 0.4
	if c.threshold() != 1 || c.holdAge() != 8*time.Second {
		t.Errorf("threshold %d, hold age %v: want 1 and 8s (7.5 s rounded up to intervals)", c.threshold(), c.holdAge())
	}
}

// TestEveryDesignHoldsTheBound runs each design on ten nodes, without and
// with 10% loss: abusive and sampled ordinary clients within the bound
// (plus the hits lost), and no ordinary client under its limit with the
// margin to spare refused.
func TestEveryDesignHoldsTheBound(t *testing.T) {
	for design := range Designs {
		for _, loss := range []float64{0, 0.1} {
			c := small(10)
			c.Design, c.Loss = design, loss
			r, err := Run(c)
			if err != nil {
				t.Fatal(err)
			}
			if !r.BoundHeld {
				t.Errorf("%s, loss %v: bound not held: abusive %.3f, ordinary %.3f of it", design, loss, r.AbusiveBoundUse, r.OrdinaryBoundUse)
			}
			if r.OrdinaryUnderMargin == 0 || r.OrdinaryRefusedUnderMargin != 0 {
				t.Errorf("%s, loss %v: %d of %d ordinary clients under their limit by the margin were refused", design, loss, r.OrdinaryRefusedUnderMargin, r.OrdinaryUnderMargin)
			}
			if (loss > 0) != (r.Lost > 0) {
				t.Errorf("%s, loss %v: %d lost", design, loss, r.Lost)
			}
			if r.AbusiveServedMax < int(r.Ideal*0.9) {
				t.Errorf("%s, loss %v: abusive clients served %d, under 90%% of b + r*T = %.0f", design, loss, r.AbusiveServedMax, r.Ideal)
			}
		}
	}
}

// TestRelayHoldSendsLess: at 50 nodes, with relays that hold, a node
// receives a fraction of what today's protocol brings it, and less than
// today's protocol brings it at 10 nodes; the relays carry the load, and
// the cluster still holds the bound.
func TestRelayHoldSendsLess(t *testing.T) {
	run := func(n int, design string) Result {
		c := small(n)
		c.Design, c.Duration = design, 10*time.Second
		r, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	today10, today50, held50 := run(10, "today"), run(50, "today"), run(50, "relay-hold")
	t.Logf("received per node: today %.0f B/s at 10 nodes, %.0f at 50; relay-hold %.0f at 50 (relays %.0f)",
		today10.RecvBytesMean, today50.RecvBytesMean, held50.RecvBytesMean, held50.RecvBytesMax)
	if held50.RecvBytesMean*5 > today50.RecvBytesMean || held50.RecvBytesMean > today10.RecvBytesMean {
		t.Errorf("relay-hold at 50 nodes: %.0f B/s received per node; today %.0f at 50 nodes, %.0f at 10", held50.RecvBytesMean, today50.RecvBytesMean, today10.RecvBytesMean)
	}
	if held50.RemoteHitsMean*5 > today50.RemoteHitsMean {
		t.Errorf("relay-hold applies %.0f remote hits per node per second, today %.0f", held50.RemoteHitsMean, today50.RemoteHitsMean)
	}
	if held50.RecvBytesMax < 5*held50.RecvBytesMean {
		t.Errorf("the relays receive %.0f B/s, the mean node %.0f: want the relays to carry the reports", held50.RecvBytesMax, held50.RecvBytesMean)
	}
	if held50.Dropped == 0 {
		t.Error("no held hits dropped: the long tail is being sent")
	}
	if !held50.BoundHeld || held50.OrdinaryRefusedUnderMargin != 0 {
		t.Errorf("relay-hold at 50 nodes: bound held %v, %d ordinary clients refused under the margin", held50.BoundHeld, held50.OrdinaryRefusedUnderMargin)
	}
}

// TestRelaysFallSilent: when every relay falls silent, the nodes send
// directly after the silence timeout; the hits sent to the silent relays
// in between are lost, and the bound plus them still holds, as does the
// rate plus them after the fall.
func TestRelaysFallSilent(t *testing.T) {
	c := small(20)
	c.Design, c.Duration, c.RelayFail = "relay-hold", 60*time.Second, 30*time.Second
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	c.RelayFail = 0
	steady, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("relays silent from 30 s: %.0f B/s received per node (%.0f with relays), rate %.3f of the limit, %.0f abusive hits lost", r.RecvBytesMean, steady.RecvBytesMean, r.AbusiveRateRatio, r.LostAbusive)
	if r.LostAbusive == 0 || steady.LostAbusive != 0 {
		t.Errorf("abusive hits lost: %.0f with silent relays, %.0f without", r.LostAbusive, steady.LostAbusive)
	}
	if r.RecvBytesMean < 2*steady.RecvBytesMean {
		t.Errorf("%.0f B/s received per node once the relays fell silent, %.0f with them: the nodes did not send directly", r.RecvBytesMean, steady.RecvBytesMean)
	}
	if !r.BoundHeld {
		t.Errorf("bound not held: abusive %.3f of it", r.AbusiveBoundUse)
	}
	// Over the second half, from the fall on, the abusive clients are
	// served their rate plus at most the hits lost.
	if excess := (r.AbusiveRateRatio - 1) * c.Rate * 30; excess > r.LostAbusive {
		t.Errorf("abusive rate %.3f of the limit after the relays fell silent: %.0f over, %.0f hits lost", r.AbusiveRateRatio, excess, r.LostAbusive)
	}
}
