package daemon

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file adds to faketime_test.go's harness what the fault tests on
// fake time need beside it (faults_fake_test.go, partition_fake_test.go,
// segments_fake_test.go): a daemon's log, a script of steps a load runs
// between its queries, waits on fake time, a crash, the counts of a load
// by window and by node, and a stranger on a network who listens, sends
// and relays.

// loadSteps is a script a fake load runs between its queries, in the
// test goroutine (give its turn to runLoad as down): its steps in order,
// each tried at every turn from its offset on until it reports done; and
// the nodes it took down, skipped at their turns.
type loadSteps struct {
	t     *testing.T
	start time.Time // the load's start: make the script just before runLoad
	steps []loadStep
	since time.Time // when the current step was first tried
	down  map[int]bool
}

// loadStep is one step of a script: from offset at after the load's
// start, do is called at each turn until it returns true.
type loadStep struct {
	at time.Duration
	do func() bool
}

// newLoadSteps is an empty script for a load starting now.
func newLoadSteps(t *testing.T) *loadSteps {
	return &loadSteps{t: t, start: time.Now(), down: map[int]bool{}}
}

// at adds a step that runs do once, at offset from the load's start or
// as soon as the steps before it are done.
func (s *loadSteps) at(offset time.Duration, do func()) {
	s.steps = append(s.steps, loadStep{offset, func() bool { do(); return true }})
}

// await adds a step that holds the script, from offset from the load's
// start, until cond holds, failing t if it does not within of the step's
// first try; took is then how long it waited.
func (s *loadSteps) await(from, within time.Duration, what string, cond func() bool) (took *time.Duration) {
	took = new(time.Duration)
	s.steps = append(s.steps, loadStep{from, func() bool {
		waited := time.Since(s.since)
		if cond() {
			*took = waited
			return true
		}
		if waited > within {
			s.t.Fatalf("waited %v into the load for %s", within, what)
		}
		return false
	}})
	return took
}

// turn runs the steps due, and reports whether node k is down.
func (s *loadSteps) turn(k int) bool {
	for len(s.steps) > 0 && time.Since(s.start) >= s.steps[0].at {
		if s.since.IsZero() {
			s.since = time.Now()
		}
		if !s.steps[0].do() {
			break
		}
		s.steps, s.since = s.steps[1:], time.Time{}
	}
	return s.down[k]
}

// finish fails t unless every step was done before the load ended.
func (s *loadSteps) finish() {
	s.t.Helper()
	if len(s.steps) > 0 {
		s.t.Fatalf("the load ended %d steps of its script early", len(s.steps))
	}
}

// awaitFake lets fake time pass, a millisecond at a time, until cond
// holds once every other goroutine of the bubble is blocked, and returns
// how long that took; it fails t if cond does not hold within.
func awaitFake(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		synctest.Wait()
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// kill stops the node as SIGKILL would: its gossip transport closes
// first, so its last hits are never reported and it says no goodbye.
func (n *fakeNode) kill() {
	n.tr.Close()
	n.stop()
}

// settle lets the last reports and repairs of a load that ended at end
// arrive and checks what a real cluster waits for (tests/harness' Settle
// and tests/faults' awaitRepairs): every node of c reported within an
// interval after end, every other heard from it after that report, and
// no node asked for a datagram again over the last three intervals.
func (c fakeCluster) settle(t *testing.T, end time.Time, interval time.Duration) {
	t.Helper()
	time.Sleep(interval)
	synctest.Wait()
	reported := make([]time.Time, len(c))
	for i, p := range c {
		if reported[i] = p.gossip.node.Stats().LastReport; !reported[i].After(end) {
			t.Errorf("%s did not report within %v of the load's end", p.name, interval)
		}
	}
	time.Sleep(3 * interval)
	asked := c.counters().Asked
	time.Sleep(3 * interval)
	synctest.Wait()
	if now := c.counters().Asked; now != asked {
		t.Errorf("the nodes still ask for datagrams again %v after the load: %d, then %d", 7*interval, asked, now)
	}
	for i, p := range c {
		for _, r := range c {
			if v, _ := peerOf(r, p.id()); r != p && !v.LastHeard.After(reported[i]) {
				t.Errorf("%s last heard %s at %v, not after its report at %v", r.name, p.name, v.LastHeard, reported[i])
			}
		}
	}
}

// peerOf is r's view of node id, and whether r lists it.
func peerOf(r *fakeNode, id uint64) (gossip.PeerInfo, bool) {
	for _, p := range r.peers() {
		if p.Node == id {
			return p, true
		}
	}
	return gossip.PeerInfo{}, false
}

// missedOf is how many of the hits each sender served each receiver never
// applied (a node is not its own receiver), served giving what each
// sender served: the most any one receiver missed, and the sum over all.
// It fails t if a receiver applied more of a sender's hits than it served.
func missedOf(t *testing.T, receivers, senders []*fakeNode, served func(*fakeNode) int) (worst, sum int) {
	t.Helper()
	for _, r := range receivers {
		n := 0
		for _, p := range senders {
			if p == r {
				continue
			}
			v, _ := peerOf(r, p.id())
			if applied := int(v.Hits); applied > served(p) {
				t.Errorf("%s applied %d hits from %s, which served %d", r.name, applied, p.name, served(p))
			} else {
				n += served(p) - applied
			}
		}
		worst, sum = max(worst, n), sum+n
	}
	return worst, sum
}

// servedIn is how many queries the nodes given by index (all if none)
// were served in [from, to).
func (l *fakeLoad) servedIn(from, to time.Time, nodes ...int) int {
	n := 0
	for _, at := range l.times(nodes...) {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// mostIn is the most the nodes given by index (all if none) were served
// in any window of length w.
func (l *fakeLoad) mostIn(w time.Duration, nodes ...int) int {
	all := l.times(nodes...)
	most := 0
	for i, j := 0, 0; j < len(all); j++ {
		for all[j].Sub(all[i]) >= w {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// times are the instants the nodes given by index (all if none) were
// served at, in order.
func (l *fakeLoad) times(nodes ...int) []time.Time {
	var all []time.Time
	for i, ok := range l.ok {
		if len(nodes) == 0 || slices.Contains(nodes, i) {
			all = append(all, ok...)
		}
	}
	slices.SortFunc(all, time.Time.Compare)
	return all
}

// checkFaultBound checks what the load was served, over the whole run
// and in its busiest second, against the cluster bound for n nodes of
// rate and burst reporting every fakeInterval with delay d, plus lost
// hits, and returns the whole run's bound (tests/faults' checkBound).
func checkFaultBound(t *testing.T, l *fakeLoad, n int, rate float64, burst int, d time.Duration, lost int) float64 {
	t.Helper()
	whole, second := clusterBound(n, rate, burst, fakeInterval, d, l.duration()), clusterBound(n, rate, burst, fakeInterval, d, time.Second)
	if s := l.served(); float64(s) > whole+float64(lost) {
		t.Errorf("served %d in %v, over the bound %.0f for %d nodes plus %d hits lost", s, l.duration(), whole, n, lost)
	}
	if s := l.most(time.Second); float64(s) > second+float64(lost) {
		t.Errorf("served %d in 1s, over the bound %.0f for %d nodes plus %d hits lost", s, second, n, lost)
	}
	return whole
}

// fakeFigures logs a load's figures as tests/harness' Figures does, for
// docs/reliability.md.
func fakeFigures(t *testing.T, l *fakeLoad, limit float64, extra string, c gossipCounters) {
	t.Helper()
	w := l.duration()
	t.Logf("figures: %s: served %d in %.1fs (%.1f/s) against a bound of %.0f; most in any 1s %d; %s; counters over all nodes: %v",
		t.Name(), l.served(), w.Seconds(), float64(l.served())/w.Seconds(), limit, l.most(time.Second), extra, c)
}

// fakeTap is a stranger on a network: a transport of the test's own,
// which hears every node's datagrams and sends to every node.
type fakeTap struct {
	*transport.MemTransport
}

// capture returns the first datagram the tap hears that decodes under key
// and satisfies match, failing t if none does within 10 s.
func (tp fakeTap) capture(t *testing.T, key []byte, match func(m wire.Message) bool) (transport.Packet, wire.Message) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case p := <-tp.Packets():
			if m, err := wire.Decode(p.Data, key); err == nil && match(m) {
				return p, m
			}
		case <-timeout:
			t.Fatal("the tap heard no such datagram within 10s")
		}
	}
}

// send sends b to every node.
func (tp fakeTap) send(t *testing.T, b []byte) {
	t.Helper()
	if err := tp.Send(b); err != nil {
		t.Fatal(err)
	}
}

// relay passes every datagram the tap hears from the node named from on
// to every node, once (a copy the network duplicated is passed on once),
// in swapped pairs: the second, then the first. It runs until the tap
// closes, and returns how many pairs it swapped so far.
func (tp fakeTap) relay(from string) *atomic.Int64 {
	swapped := new(atomic.Int64)
	go func() {
		seen := map[string]bool{}
		var held []byte
		for p := range tp.Packets() {
			if p.From != from || seen[string(p.Data)] {
				continue
			}
			seen[string(p.Data)] = true
			if held == nil {
				held = p.Data
				continue
			}
			tp.Send(p.Data)
			tp.Send(held)
			held = nil
			swapped.Add(1)
		}
	}()
	return swapped
}

// dropFrom is a transport that receives nothing from the node named
// from: the way between the two is cut, one way.
func dropFrom(from string) func(*transport.MemTransport) transport.Transport {
	return func(tr *transport.MemTransport) transport.Transport {
		d := &filtered{MemTransport: tr, ch: make(chan transport.Packet, 1024)}
		go func() {
			defer close(d.ch)
			for p := range tr.Packets() {
				if p.From != from {
					d.ch <- p
				}
			}
		}()
		return d
	}
}

// filtered is a MemTransport whose Packets are those a filter passed.
type filtered struct {
	*transport.MemTransport
	ch chan transport.Packet
}

// Packets returns what the filter passed.
func (f *filtered) Packets() <-chan transport.Packet { return f.ch }
