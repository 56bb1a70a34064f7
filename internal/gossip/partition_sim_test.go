package gossip

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// This file measures the partition policies (members.go; docs/design.md,
// "The cluster bound"): four nodes on a fake clock over the in-memory
// network, one tag at 10x its rate spread over all of them, split 2/2 for
// 30 s and healed, then one node killed and, once it is forgotten,
// another stopped cleanly. docs/reliability.md publishes what it logs.

// splitRun is the timeline of one partition simulation.
type splitRun struct {
	policy   string // "whole" or "share"
	rate     float64
	burst    int
	interval time.Duration
	step     time.Duration
	forget   time.Duration
	split    time.Duration // the cluster splits 2/2
	heal     time.Duration // and heals
	kill     time.Duration // node 3 dies without a word
	stop     time.Duration // node 2 stops cleanly, saying goodbye
	end      time.Duration
}

func defaultSplitRun(policy string) splitRun {
	return splitRun{policy: policy, rate: 2, burst: 5, interval: time.Second, step: 10 * time.Millisecond,
		forget: testForgetAfter, split: time.Minute, heal: 90 * time.Second, kill: 2 * time.Minute,
		stop: 210 * time.Second, end: 270 * time.Second}
}

// splitResult is what a splitRun measured.
type splitResult struct {
	served     []time.Duration // cluster-wide
	byNode     [][]time.Duration
	healWhole  time.Duration // from healing until every node holds the whole rate again
	killWhole  time.Duration // from the kill until every node left holds it again, once one did not
	stopWhole  time.Duration // from the clean stop until every node left holds it again
	lowestStop float64       // the lowest share a node held after the clean stop
	shares     []string      // every change of a node's share, for the log
}

// run drives the cluster: node i reports at its own phase, then checks
// its peers as the running loop does; the load balancer sends each query
// to a node alive at random.
func (c splitRun) run(t *testing.T) splitResult {
	t.Helper()
	pol := bucket.Policy{Rate: c.rate, Burst: c.burst}
	share := make([]float64, 4)
	var res splitResult
	var s *sim
	s = newSim(t, 4, pol, c.interval, transport.MemConfig{Delay: 20 * time.Millisecond, Seed: 11}, func(sn *simNode, cfg *Config) {
		i := int(sn.name[1] - '0')
		share[i] = 1
		cfg.ForgetAfter = c.forget
		cfg.Members = func(m Members) {
			share[i] = m.Share
			res.shares = append(res.shares, fmt.Sprintf("%v %s share %.2f (live %d, missing %d, left %d)",
				s.now.Sub(simT0), sn.name, m.Share, m.Live, len(m.Missing), m.Left))
			if c.policy != "share" {
				return
			}
			p := pol
			p.Share = m.Share
			if err := sn.table.Reconfigure(s.now, bucket.Config{Default: p, MaxTags: 1000, MaxTagBytes: 256}); err != nil {
				t.Fatal(err)
			}
		}
	})
	res.byNode = make([][]time.Duration, 4)
	alive := []bool{true, true, true, true}
	lb := rand.New(rand.NewSource(42))
	perStep := 10 * c.rate * c.step.Seconds()
	stepsPerInterval := int(c.interval / c.step)
	whole := func() bool {
		for i, ok := range alive {
			if ok && share[i] != 1 {
				return false
			}
		}
		return true
	}
	res.lowestStop = 1
	var healing, killed, stopped, killShrank bool
	due := 0.0
	for k := 1; k <= int(c.end/c.step); k++ {
		s.advanceTo(time.Duration(k) * c.step)
		at := s.now.Sub(simT0)
		switch at {
		case c.split:
			s.net.Partition([]string{"n0", "n1"}, []string{"n2", "n3"})
		case c.heal:
			s.net.Partition()
			healing = true
		case c.kill:
			alive[3], killed = false, true
			s.nodes[3].tr.Close()
		case c.stop:
			// Node.Stop, on the fake clock: the last report, then goodbye.
			s.report(2)
			if err := s.nodes[2].node.sayGoodbye(s.now); err != nil {
				t.Fatal(err)
			}
			alive[2], stopped = false, true
			s.nodes[2].tr.Close()
		}
		s.deliver()
		for i, sn := range s.nodes {
			if alive[i] && (k+i*stepsPerInterval/4)%stepsPerInterval == 0 {
				s.report(i)
				sn.node.checkSilence(s.now)
				sn.node.checkMembers(s.now)
			}
		}
		if healing && whole() {
			res.healWhole, healing = at-c.heal, false
		}
		if killed && !whole() {
			killShrank = true
		}
		if killed && killShrank && whole() {
			res.killWhole, killed = at-c.kill, false
		}
		if stopped {
			for i, ok := range alive {
				if ok {
					res.lowestStop = min(res.lowestStop, share[i])
				}
			}
			if whole() && res.stopWhole == 0 {
				res.stopWhole, stopped = at-c.stop, false
			}
		}
		for due += perStep; due >= 1; due-- {
			i := lb.Intn(4)
			for !alive[i] {
				i = lb.Intn(4)
			}
			if s.query(i, "client") {
				res.byNode[i] = append(res.byNode[i], at)
			}
		}
	}
	res.served = s.served
	if healing || killed {
		t.Fatalf("the cluster never held the whole rate again: healing %v, after the kill %v", healing, killed)
	}
	return res
}

// count is what nodes in served in [from, to).
func (r splitResult) count(from, to time.Duration, nodes ...int) int {
	n := 0
	for _, i := range nodes {
		n += countBetween(r.byNode[i], from, to)
	}
	return n
}

// TestPartitionPolicies splits a 2/2 cluster for 30 s under each policy.
// Under "share" the two parts together serve within 15% of the rate, as
// a whole cluster does; under "whole", each part holds the whole rate,
// about twice it together. Both hold the rate when whole, and return to
// it once healed; under "share" a killed node's share returns once it is
// forgotten and a stopped one's never goes: it said goodbye.
func TestPartitionPolicies(t *testing.T) {
	for _, policy := range []string{"whole", "share"} {
		t.Run(policy, func(t *testing.T) {
			c := defaultSplitRun(policy)
			r := c.run(t)
			for _, l := range r.shares {
				t.Log(l)
			}
			window := (c.heal - c.split).Seconds()
			want := c.rate * window
			a, b := r.count(c.split, c.heal, 0, 1), r.count(c.split, c.heal, 2, 3)
			ratio := float64(a+b) / want
			t.Logf("split 30 s: part n0+n1 served %d, part n2+n3 %d, together %d against %.0f at the rate: %.2fx (over %+d)",
				a, b, a+b, want, ratio, a+b-int(want))
			before := float64(r.count(20*time.Second, c.split, 0, 1, 2, 3)) / (c.split - 20*time.Second).Seconds()
			healed := float64(r.count(c.heal+10*time.Second, c.kill, 0, 1, 2, 3)) / (c.kill - c.heal - 10*time.Second).Seconds()
			t.Logf("whole before the split: %.2f/s; healed: %.2f/s, every node whole %v after healing", before, healed, r.healWhole)
			afterKill := float64(r.count(c.kill+5*time.Second, c.kill+c.forget, 0, 1, 2)) / (c.forget - 5*time.Second).Seconds()
			forgotten := float64(r.count(c.kill+c.forget+10*time.Second, c.stop, 0, 1, 2)) / (c.stop - c.kill - c.forget - 10*time.Second).Seconds()
			t.Logf("node killed: %.2f/s until forgotten (%.0f%% of the rate), whole again %v after the kill, then %.2f/s", afterKill, 100*afterKill/c.rate, r.killWhole, forgotten)
			afterStop := float64(r.count(c.stop+5*time.Second, c.end, 0, 1)) / (c.end - c.stop - 5*time.Second).Seconds()
			t.Logf("node stopped with goodbye: lowest share %.2f after it, whole %v after the stop; %.2f/s", r.lowestStop, r.stopWhole, afterStop)

			for name, got := range map[string]float64{"before the split": before, "healed": healed, "after forgetting": forgotten, "after the clean stop": afterStop} {
				if got < 0.95*c.rate || got > 1.05*c.rate {
					t.Errorf("%s: %.2f/s, want the rate %.0f/s ± 5%%", name, got, c.rate)
				}
			}
			if r.healWhole > c.interval+time.Second {
				t.Errorf("whole again %v after healing, want within an interval and its delivery", r.healWhole)
			}
			switch policy {
			case "whole":
				if ratio < 1.85 || ratio > 2.15 {
					t.Errorf("split under whole: %.2fx the rate, want about 2x (each part the whole rate)", ratio)
				}
				if afterKill < 0.95*c.rate || afterKill > 1.05*c.rate {
					t.Errorf("after the kill: %.2f/s, want the rate: nothing scales it", afterKill)
				}
			case "share":
				if ratio < 0.85 || ratio > 1.15 {
					t.Errorf("split under share: %.2fx the rate, want within 15%%", ratio)
				}
				if afterKill > 0.8*c.rate || afterKill < 0.7*c.rate {
					t.Errorf("after the kill: %.2f/s, want about 3/4 of the rate until the killed node is forgotten", afterKill)
				}
			}
			// The membership is counted under either policy.
			if r.killWhole < c.forget || r.killWhole > c.forget+2*c.interval {
				t.Errorf("whole again %v after the kill, want the forget time %v and at most two intervals", r.killWhole, c.forget)
			}
			if r.lowestStop != 1 {
				t.Errorf("after a clean stop a node held %.2f: its goodbye was not heeded", r.lowestStop)
			}
			if policy == "share" {
				missing := strings.Contains(strings.Join(r.shares, "\n"), "missing 2")
				if !missing {
					t.Error("no node counted two peers missing during the split")
				}
			}
		})
	}
}
