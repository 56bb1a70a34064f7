package gossip

import (
	"math/rand"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// clusterRun is a simulated cluster under a random load balancer.
type clusterRun struct {
	nodes     int
	rate      float64
	burst     int
	interval  time.Duration
	step      time.Duration // clock resolution of the simulation
	overload  float64       // offered load as a multiple of rate
	duration  time.Duration
	net       transport.MemConfig
	partition [2]time.Duration // split the cluster in two halves from [0] to [1], if set
}

// defaultRun: 8 nodes, 10x overload for 10 simulated minutes.
func defaultRun() clusterRun {
	return clusterRun{
		nodes: 8, rate: 10, burst: 20, interval: time.Second, step: 10 * time.Millisecond,
		overload: 10, duration: 10 * time.Minute,
		net: transport.MemConfig{Delay: 20 * time.Millisecond, Seed: 7},
	}
}

// delay is the longest delivery delay d of the cluster bound (docs/design.md), including
// the simulation's clock resolution.
func (c clusterRun) delay() time.Duration { return c.net.Delay + c.net.Jitter + c.step }

// bound is the cluster bound's most queries served cluster-wide in any window
// of length w: b + r*w + (N-1)*(b + r*(I+d)).
func (c clusterRun) bound(nodes int, w time.Duration) float64 {
	b, r := float64(c.burst), c.rate
	return b + r*w.Seconds() + float64(nodes-1)*(b+r*(c.interval+c.delay()).Seconds())
}

// run drives the cluster and returns it. Node i reports at its own phase
// of the interval, as real daemons started at different times do.
func (c clusterRun) run(t *testing.T) *sim {
	t.Helper()
	s := newSim(t, c.nodes, bucket.Policy{Rate: c.rate, Burst: c.burst}, c.interval, c.net)
	lb := rand.New(rand.NewSource(42)) // the load balancer: same choices in every run
	perStep := c.overload * c.rate * c.step.Seconds()
	steps := int(c.duration / c.step)
	stepsPerInterval := int(c.interval / c.step)
	due := 0.0
	partitioned := false
	for k := 1; k <= steps; k++ {
		s.advanceTo(time.Duration(k) * c.step)
		if c.partition[1] > 0 {
			in := s.now.Sub(simT0) >= c.partition[0] && s.now.Sub(simT0) < c.partition[1]
			if in != partitioned {
				partitioned = in
				if in {
					var a, b []string
					for i, sn := range s.nodes {
						if i < c.nodes/2 {
							a = append(a, sn.name)
						} else {
							b = append(b, sn.name)
						}
					}
					s.net.Partition(a, b)
				} else {
					s.net.Partition()
				}
			}
		}
		s.deliver()
		for i := range s.nodes {
			if (k+i*stepsPerInterval/c.nodes)%stepsPerInterval == 0 {
				s.report(i)
			}
		}
		for due += perStep; due >= 1; due-- {
			s.query(lb.Intn(c.nodes), "client")
		}
	}
	// Let the datagrams still in flight arrive.
	s.advanceTo(c.duration + c.delay())
	s.deliver()
	return s
}

// checkBound asserts the cluster never served more than the bound (plus
// slack, for hits the network lost) in any window.
func (c clusterRun) checkBound(t *testing.T, served []time.Duration, nodes int, slack float64) {
	t.Helper()
	for _, w := range []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Minute, c.duration} {
		got := maxInWindow(served, w)
		if limit := c.bound(nodes, w) + slack; float64(got) > limit {
			t.Errorf("window %v: served %d, bound %.0f", w, got, limit)
		} else {
			t.Logf("window %v: served at most %d, bound %.0f", w, got, limit)
		}
	}
}

// longRunRate is the cluster-wide rate after the first minute.
func (c clusterRun) longRunRate(served []time.Duration) float64 {
	from := time.Minute
	return float64(countBetween(served, from, c.duration)) / (c.duration - from).Seconds()
}

// lostHits counts, over every receiver, the peers' hits it never applied.
func lostHits(s *sim) float64 {
	var sent uint64
	for _, sn := range s.nodes {
		sent += sn.sent
	}
	lost := 0.0
	for _, sn := range s.nodes {
		lost += float64(sent - sn.sent - sn.applied)
	}
	return lost
}

func TestClusterHoldsRate(t *testing.T) {
	c := defaultRun()
	s := c.run(t)
	c.checkBound(t, s.served, c.nodes, 0)
	if rate := c.longRunRate(s.served); rate < c.rate*0.98 || rate > c.rate*1.02 {
		t.Errorf("long-run rate %.3f/s, want %.1f ± 2%%", rate, c.rate)
	} else {
		t.Logf("long-run rate %.3f/s for a rate of %.1f/s", rate, c.rate)
	}
	if lost := lostHits(s); lost != 0 {
		t.Errorf("%v hits lost on a lossless network", lost)
	}
}

// Lost reports are repaired (repair.go): at 10%, 20% and 50% random
// loss the long-run rate stays within 3%, 3% and 10% of the lossless run,
// and the most served in 1 s, 1 min and 10 min within the bound plus the
// hits still lost. docs/reliability.md has the figures:
//
//	go test ./internal/gossip -run TestClusterWithLoss -v
func TestClusterWithLoss(t *testing.T) {
	base := defaultRun().run(t)
	c0 := defaultRun()
	lossless := c0.longRunRate(base.served)
	baseBytes := sentBytes(base)
	t.Logf("lossless: most served %d / %d / %d in 1 s / 1 min / 10 min, long-run %.3f/s, %.0f bytes/s a node",
		maxInWindow(base.served, time.Second), maxInWindow(base.served, time.Minute), maxInWindow(base.served, 10*time.Minute),
		lossless, baseBytes)
	for _, tc := range []struct {
		loss, within float64
	}{{0.1, 0.03}, {0.2, 0.03}, {0.5, 0.10}} {
		c := defaultRun()
		c.net.Loss = tc.loss
		s := c.run(t)
		lost := lostHits(s)
		rate := c.longRunRate(s.served)
		var st Stats
		for _, sn := range s.nodes {
			x := sn.node.Stats()
			st.Lost += x.Lost
			st.Repair.Repaired += x.Repair.Repaired
			st.Repair.Resent += x.Repair.Resent
			st.Repair.Asked += x.Repair.Asked
		}
		t.Logf("%.0f%% loss: most served %d / %d / %d, long-run %.3f/s (%+.1f%%), %d served (lossless %d); "+
			"%d datagrams repaired, %d resent, %d still lost, %.0f hits lost over all receivers; %.0f bytes/s a node",
			100*tc.loss, maxInWindow(s.served, time.Second), maxInWindow(s.served, time.Minute), maxInWindow(s.served, 10*time.Minute),
			rate, 100*(rate/lossless-1), len(s.served), len(base.served), st.Repair.Repaired, st.Repair.Resent, st.Lost, lost, sentBytes(s))
		if st.Repair.Repaired == 0 {
			t.Errorf("%.0f%% loss: nothing repaired", 100*tc.loss)
		}
		if rate > lossless*(1+tc.within) {
			t.Errorf("%.0f%% loss: long-run rate %.3f/s, more than %.0f%% over the lossless %.3f/s", 100*tc.loss, rate, 100*tc.within, lossless)
		}
		c.checkBound(t, s.served, c.nodes, lost)
	}
}

// sentBytes is the bytes each node sent a second, on average over the run.
func sentBytes(s *sim) float64 {
	var b uint64
	for _, sn := range s.nodes {
		b += sn.node.Stats().BytesSent
	}
	return float64(b) / float64(len(s.nodes)) / defaultRun().duration.Seconds()
}

func TestClusterWithDuplication(t *testing.T) {
	base := defaultRun().run(t)
	c := defaultRun()
	c.net.Duplicate = 0.3
	s := c.run(t)
	if len(s.served) != len(base.served) {
		t.Errorf("duplication changed the served count: %d vs %d", len(s.served), len(base.served))
	}
	var dups uint64
	for _, sn := range s.nodes {
		dups += sn.node.Stats().DroppedDuplicate
	}
	if dups == 0 {
		t.Error("no duplicates dropped at 30% duplication")
	}
	c.checkBound(t, s.served, c.nodes, 0)
}

func TestClusterWithReordering(t *testing.T) {
	c := defaultRun()
	c.net.Jitter = 800 * time.Millisecond // later reports overtake earlier ones
	s := c.run(t)
	c.checkBound(t, s.served, c.nodes, 0)
	if lost := lostHits(s); lost != 0 {
		t.Errorf("%v hits lost to reordering", lost)
	}
	for _, sn := range s.nodes {
		if st := sn.node.Stats(); st.Lost != 0 || st.DroppedDuplicate != 0 {
			t.Errorf("%s: reordering counted as %d lost, %d duplicate", sn.name, st.Lost, st.DroppedDuplicate)
		}
	}
}

func TestClusterPartitionHeals(t *testing.T) {
	c := defaultRun()
	c.partition = [2]time.Duration{2 * time.Minute, 4 * time.Minute}
	s := c.run(t)
	// Split, each half holds the rate on its own: the cluster serves about
	// twice the rate, within each half's bound.
	split := float64(countBetween(s.served, c.partition[0]+30*time.Second, c.partition[1])) / 90
	if split < 1.9*c.rate || split > 2.1*c.rate {
		t.Errorf("partitioned: %.2f/s, want about %.0f/s (each half holds %.0f/s)", split, 2*c.rate, c.rate)
	}
	during := inRange(s.served, c.partition[0], c.partition[1])
	if got, limit := maxInWindow(during, 10*time.Second), 2*c.bound(c.nodes/2, 10*time.Second); float64(got) > limit {
		t.Errorf("partitioned: %d served in 10 s, over twice a half's bound %.0f", got, limit)
	}
	// Healed, the whole cluster holds one rate again.
	healed := float64(countBetween(s.served, c.partition[1]+time.Minute, c.duration)) / (c.duration - c.partition[1] - time.Minute).Seconds()
	if healed < 0.98*c.rate || healed > 1.02*c.rate {
		t.Errorf("healed: %.2f/s, want %.0f/s ± 2%%", healed, c.rate)
	}
	after := inRange(s.served, c.partition[1], c.duration)
	if got, limit := maxInWindow(after, 10*time.Second), c.bound(c.nodes, 10*time.Second)+c.bound(c.nodes/2, 0); float64(got) > limit {
		t.Errorf("healing: %d served in 10 s, bound %.0f", got, limit)
	}
	t.Logf("rate %.2f/s split, %.2f/s healed", split, healed)
}

func inRange(served []time.Duration, from, to time.Duration) []time.Duration {
	var out []time.Duration
	for _, at := range served {
		if at >= from && at < to {
			out = append(out, at)
		}
	}
	return out
}
