package gossip

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// This file measures how far behind a node's buckets are: the time from
// a hit served on one node until every other node has applied it, over
// the in-memory network on a fake clock. docs/reliability.md publishes
// what it logs.

// convergence serves one hit of a tag of its own at a time on a node
// picked at random and returns, per hit, the time until the last of the
// other nodes applied it (hits some node never applied are left out and
// counted in lost).
func convergence(t *testing.T, nodes int, interval time.Duration, mc transport.MemConfig) (times []time.Duration, lost int) {
	t.Helper()
	const step, hits = 10 * time.Millisecond, 3000
	applied := make([]map[string]time.Duration, nodes) // per node: tag -> when applied
	s := newSim(t, nodes, bucket.Policy{Rate: 1, Burst: 10}, interval, mc, func(sn *simNode, cfg *Config) {
		i := int(sn.name[1] - '0')
		applied[i] = map[string]time.Duration{}
		inner := cfg.Apply
		cfg.Apply = func(now time.Time, hs []Hit) {
			for _, h := range hs {
				if _, ok := applied[i][h.Key]; !ok {
					applied[i][h.Key] = now.Sub(simT0)
				}
			}
			inner(now, hs)
		}
	})
	rng := rand.New(rand.NewSource(3))
	served := make([]time.Duration, hits)
	from := make([]int, hits)
	stepsPerInterval := int(interval / step)
	every := 7 // steps between two hits: hits land at every phase of the interval
	end := time.Duration(hits*every)*step + 5*interval
	if mc.Loss > 0 {
		end += peer.RepairWithin(interval) // the last losses' repairs
	}
	for k, h := 1, 0; time.Duration(k)*step <= end; k++ {
		s.advanceTo(time.Duration(k) * step)
		s.deliver()
		for i := range s.nodes {
			if (k+i*stepsPerInterval/nodes)%stepsPerInterval == 0 {
				s.report(i)
			}
		}
		if h < hits && k%every == 0 {
			from[h] = rng.Intn(nodes)
			served[h] = s.now.Sub(simT0)
			if !s.query(from[h], fmt.Sprintf("h%d", h)) {
				t.Fatalf("hit %d refused", h)
			}
			h++
		}
	}
	// Each node says how far behind each peer is: the last datagram's
	// delay plus an interval.
	for _, p := range s.nodes[0].node.Peers() {
		if mc.Jitter == 0 && mc.Loss == 0 && (p.Delay != mc.Delay || p.Behind != mc.Delay+interval) {
			t.Errorf("peer %s: delay %v, behind %v; want %v and %v", peer.Name(p.Node), p.Delay, p.Behind, mc.Delay, mc.Delay+interval)
		}
		if p.Delay > mc.Delay+mc.Jitter && mc.Loss == 0 { // a repaired datagram keeps its send time
			t.Errorf("peer %s: delay %v, more than the network's %v", peer.Name(p.Node), p.Delay, mc.Delay+mc.Jitter)
		}
	}
	for h := range hits {
		last, ok := time.Duration(0), true
		for i := range nodes {
			if i == from[h] {
				continue
			}
			at, seen := applied[i][fmt.Sprintf("h%d", h)]
			if !seen {
				ok = false
				break
			}
			last = max(last, at-served[h])
		}
		if !ok {
			lost++
			continue
		}
		times = append(times, last)
	}
	slices.Sort(times)
	return times, lost
}

// quantile is the q-quantile of sorted times.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// TestConvergenceTime: a hit served on one node is applied on every
// other within one interval (the most it waits for its report) and the
// delivery delay, jitter included; the median is about half an interval
// more than the delay.
func TestConvergenceTime(t *testing.T) {
	const interval = time.Second
	for _, c := range []struct {
		name string
		mc   transport.MemConfig
	}{
		{"20 ms delay", transport.MemConfig{Delay: 20 * time.Millisecond, Seed: 5}},
		{"20 ms delay, 200 ms jitter", transport.MemConfig{Delay: 20 * time.Millisecond, Jitter: 200 * time.Millisecond, Seed: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			times, lost := convergence(t, 8, interval, c.mc)
			if lost != 0 || len(times) == 0 {
				t.Fatalf("%d hits never reached every node on a lossless network", lost)
			}
			ms := time.Millisecond
			p50, p99, worst := quantile(times, 0.5).Round(ms), quantile(times, 0.99).Round(ms), times[len(times)-1].Round(ms)
			t.Logf("8 nodes, interval %v, %s: a hit is on every node after %v (median), %v (99th percentile), %v at most, over %d hits",
				interval, c.name, p50, p99, worst, len(times))
			limit := interval + c.mc.Delay + c.mc.Jitter + 10*time.Millisecond // the clock's step
			if worst > limit {
				t.Errorf("slowest hit %v, want at most an interval and the delivery, %v", worst, limit)
			}
			if lo, hi := interval/2+c.mc.Delay-100*time.Millisecond, interval/2+c.mc.Delay+c.mc.Jitter+100*time.Millisecond; p50 < lo || p50 > hi {
				t.Errorf("median %v, want about half an interval and the delay, in [%v, %v]", p50, lo, hi)
			}
		})
	}
}

// TestConvergenceUnderLoss: with 20% of the datagrams lost, a lost hit
// arrives when repaired. A hit reaches all seven other nodes at once only
// with chance 0.8^7 (21%); the others wait for the gap to show (the
// sender's next datagram, an interval later), the next report's ask, and
// the resend, or further asks.
func TestConvergenceUnderLoss(t *testing.T) {
	const interval = time.Second
	mc := transport.MemConfig{Loss: 0.2, Delay: 20 * time.Millisecond, Seed: 5}
	times, lost := convergence(t, 8, interval, mc)
	ms := time.Millisecond
	p50, p90, p99, worst := quantile(times, 0.5).Round(ms), quantile(times, 0.9).Round(ms), quantile(times, 0.99).Round(ms), times[len(times)-1].Round(ms)
	t.Logf("8 nodes, interval %v, 20 ms delay, 20%% loss: a hit is on every node after %v (median), %v (90th percentile), %v (99th), %v at most; %d of %d hits never reached every node",
		interval, p50, p90, p99, worst, lost, lost+len(times))
	if lost > (lost+len(times))/100 {
		t.Errorf("%d hits never reached every node, more than 1%%", lost)
	}
	if limit := 3 * interval; p50 > limit {
		t.Errorf("median %v, want within three intervals, %v", p50, limit)
	}
	if limit := peer.RepairWithin(interval) + interval; worst > limit {
		t.Errorf("slowest hit %v, want at most the repair's %v", worst, limit)
	}
}
