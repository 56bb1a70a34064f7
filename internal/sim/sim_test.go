package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// small is a quick run: few clients so that some are over their limit.
func small(n int) Config {
	c := Default(n)
	c.Duration = 30 * time.Second
	c.Clients = 10000
	return c
}

// TestTodayHoldsTheBound runs today's protocol on ten nodes: the abusive
// clients are held to the cluster bound and, in the long run, near their
// rate; no ordinary client under its limit is refused; each node receives
// the other nine nodes' reports, a datagram each per interval.
func TestTodayHoldsTheBound(t *testing.T) {
	r, err := Run(small(10))
	if err != nil {
		t.Fatal(err)
	}
	if !r.BoundHeld || float64(r.AbusiveServedMax) > r.Bound {
		t.Errorf("abusive clients served %d, bound %.0f", r.AbusiveServedMax, r.Bound)
	}
	if r.AbusiveRateRatio > 1.1 || r.AbusiveRateRatio < 0.9 {
		t.Errorf("abusive long-run rate %.3f of the limit, want within 10%%", r.AbusiveRateRatio)
	}
	if r.OrdinaryUnderLimit == 0 || r.OrdinaryRefusedUnderLimit != 0 {
		t.Errorf("%d of %d ordinary clients under their limit were refused", r.OrdinaryRefusedUnderLimit, r.OrdinaryUnderLimit)
	}
	if r.RecvDatagramsMean < 8.9 || r.RecvDatagramsMean > 9.1 {
		t.Errorf("%.2f datagrams received per node per second, want 9 (one from each other node)", r.RecvDatagramsMean)
	}
	if r.RecvBytesMean < 8*r.SentBytesMean || r.RecvBytesMean > 10*r.SentBytesMean {
		t.Errorf("received %.0f B/s per node, sent %.0f: want about nine times", r.RecvBytesMean, r.SentBytesMean)
	}
	if !strings.Contains(r.String(), "nodes=10 design=today ") || !strings.Contains(r.String(), " bound_held=true") {
		t.Errorf("result line: %s", r)
	}
}

// TestDeterministic: the same seed gives the same figures; another seed,
// others.
func TestDeterministic(t *testing.T) {
	c := small(5)
	c.Duration = 5 * time.Second
	a, _ := Run(c)
	b, _ := Run(c)
	a.CPUMean, b.CPUMean, a.CPUMax, b.CPUMax = 0, 0, 0, 0
	a.follows, b.follows = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one seed differ:\n%+v\n%+v", a, b)
	}
	c.Seed++
	d, _ := Run(c)
	if d.SentBytesMean == a.SentBytesMean && d.AbusiveServedMax == a.AbusiveServedMax {
		t.Fatal("another seed gave the same run")
	}
}

// TestTodayGrowsWithTheCluster: what a node receives grows with the number
// of nodes at the same load per node, the growth the designs to come must
// flatten; and loss loses datagrams, counted.
func TestTodayGrowsWithTheCluster(t *testing.T) {
	c10, c40 := small(10), small(40)
	c10.Duration, c40.Duration = 5*time.Second, 5*time.Second
	r10, _ := Run(c10)
	r40, _ := Run(c40)
	if r40.RecvBytesMean < 3*r10.RecvBytesMean {
		t.Errorf("a node receives %.0f B/s of 40 nodes and %.0f of 10: want at least 3x", r40.RecvBytesMean, r10.RecvBytesMean)
	}
	c10.Loss = 0.1
	lossy, _ := Run(c10)
	if lossy.Lost == 0 || lossy.RecvDatagramsMean >= r10.RecvDatagramsMean {
		t.Errorf("with 10%% loss: %d lost, %.2f datagrams received per node per second (%.2f without)", lossy.Lost, lossy.RecvDatagramsMean, r10.RecvDatagramsMean)
	}
	if _, err := Run(Config{Nodes: 3, Design: "nope", Duration: time.Second, Step: time.Millisecond, Interval: time.Second}); err == nil {
		t.Error("an unknown design ran")
	}
}

// TestOwnerIsFlat: with the owner design, what a node receives grows far
// less than with today's from 10 to 60 nodes, and the bound holds; no
// ordinary client under its limit is refused.
func TestOwnerIsFlat(t *testing.T) {
	var today, owner [2]Result
	for i, n := range []int{10, 60} {
		c := small(n)
		c.Duration = 3 * time.Second
		today[i], _ = Run(c)
		c.Design = "owner"
		owner[i], _ = Run(c)
		if !owner[i].BoundHeld || owner[i].OrdinaryRefusedUnderLimit != 0 {
			t.Errorf("owner at %d nodes: bound held %v, %d ordinary clients refused under their limit", n, owner[i].BoundHeld, owner[i].OrdinaryRefusedUnderLimit)
		}
	}
	todayGrowth := today[1].RecvBytesMean / today[0].RecvBytesMean
	ownerGrowth := owner[1].RecvBytesMean / owner[0].RecvBytesMean
	if ownerGrowth > 3.5 || todayGrowth < 4 {
		t.Errorf("from 10 to 60 nodes, what a node receives grows %.1fx with the owner design (want at most 3.5x), %.1fx today (want at least 4x)", ownerGrowth, todayGrowth)
	}
}
