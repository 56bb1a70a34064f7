package cluster

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestRollingRestart hammers one tag at 20x its rate across four daemons
// on a bridge while each is restarted in turn, with warm start on (the
// default) and off, stopping each cleanly (SIGTERM) or killing it
// (SIGKILL). A restarted daemon without warm start hands the tag a fresh
// burst; with it, it asks its peers and takes their lower bucket within
// about an interval. Each run logs a "figures:" line for docs/reliability.md's
// Warm start section.
//
// Over-admission: the served count is held to the cluster bound of four
// nodes plus, per restart, one interval's worth of the tag's rate and what
// a killed node served and never reported.
//
// Under-admission: what was served is set against its ideal, what one
// bucket (burst b, rate r, full when the load starts) would have served
// of the very queries the load asked, at the instants it asked them
// (ideal_test.go), at every query from the load's start. From the start,
// not over any window: the cluster may run ahead of the ideal (four
// bursts at the start, a fresh bucket, a late report) and pay it back
// later, when a window starting in between rightly sees it serve less.
// From the start it may be far ahead, but never behind by more than
// this, whatever the restarts:
//
//   - Every node's bucket holds at least the ideal's tokens plus what the
//     cluster is behind the ideal: a node hears of each hit once
//     (docs/design.md, Semantics), and late, never early, and at 20x the
//     rate no bucket refills to its burst, where a late report would cost
//     more than its hits. Less only the refill a node's bucket missed
//     while it stayed full until the load first asked it, when the ideal's
//     was spent from the first query on: r times that stagger, a fifth of
//     a token when the first round takes its four ticks. A restarted
//     node's bucket, fresh or warmed to its peers' level, adds none.
//   - So a node refuses only while the cluster is behind by under
//     1 + r*stagger, and one refusal where the ideal serves leaves it
//     behind by under 2 + r*stagger.
//   - A query left unanswered (in flight at a stop) may have spent a
//     token the load never saw: one more each.
//   - With warm start, a report crossing an answer on the wire could be
//     counted twice by the node that asked: at most one report per peer,
//     an interval's worth (r*I). Once, not per restart: the node with the
//     fullest bucket serves what the others refuse, so the cluster pays a
//     double count only once every node holds one, and then the smallest;
//     a per-restart allowance would let through a double count four times
//     that size at every restart.
//
// So behind by at most 2 + r*stagger + unanswered, plus r*I with warm
// start.
func TestRollingRestart(t *testing.T) {
	for _, warm := range []bool{true, false} {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(fmt.Sprintf("warm=%v/%s", warm, sigName(sig)), func(t *testing.T) { rollingRestart(t, warm, sig) })
		}
	}
}

func sigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "kill"
	}
	return "term"
}

func rollingRestart(t *testing.T, warm bool, sig syscall.Signal) {
	if !netns.Run(t) {
		return
	}
	c := harness.FaultPolicy
	if !warm {
		c.Gossip = "warm_start = false\n"
	}
	l := harness.NewLAN(t, 4)
	ds := l.StartAll(t, c)
	const every = 1500 * time.Millisecond // between restarts
	ld := harness.StartLoad(l.Hosts, "rolling", time.Duration(len(l.Hosts)+1)*every)
	type killed struct {
		d           *harness.Daemon
		last, until time.Time
	}
	var kills []killed
	for i, h := range l.Hosts {
		harness.At(ld, time.Duration(i+1)*every)
		d := h.Daemon()
		if sig == syscall.SIGKILL {
			// What it served since its last report is lost with it:
			// no peer ever applies those hits (counted once the load is
			// over: its record is the load goroutine's until then).
			last := d.LastReport(t)
			h.Kill(t)
			kills = append(kills, killed{d, last, time.Now()})
		} else {
			h.Mu.Lock()
			h.D = nil
			h.Mu.Unlock()
			d.Stop(t)
		}
		h.Restart(t)
	}
	ld.Wait(t, 2*len(l.Hosts)) // queries in flight at a stop may fail
	unreported := 0
	for _, k := range kills {
		unreported += ld.ServedIn(k.last, k.until, k.d)
	}
	restarts := len(l.Hosts)
	n := len(l.Hosts)
	base := harness.Bound(n, c, harness.FaultDelay, ld.Duration())
	perRestart := c.Rate * (harness.LANInterval + harness.FaultDelay).Seconds()
	limit := base + float64(restarts)*perRestart + float64(unreported)
	served := ld.Served()
	if float64(served) > limit {
		t.Errorf("served %d, over the bound %.0f for %d nodes plus one interval's worth (%.0f) per restart and the %d hits killed nodes never reported (%.0f)",
			served, base, n, perRestart, unreported, limit)
	}
	// With warm start, a restart adds at most an interval's worth to what
	// one bucket would serve (b + r*T), with one burst of slack for the
	// scheduling of a busy machine; without, a burst per restart.
	oneBucket := float64(c.Burst) + c.Rate*ld.Duration().Seconds()
	if warmLimit := oneBucket + float64(restarts)*perRestart + float64(unreported) + float64(c.Burst); warm && float64(served) > warmLimit {
		t.Errorf("served %d with warm start: over b + r*T = %.0f plus one interval's worth per restart, the hits never reported and one burst (%.0f)",
			served, oneBucket, warmLimit)
	}
	// Under-admission, at every query from the start (see above).
	v := ld.VersusIdeal(c)
	var stagger time.Duration // from the first query to the last node's first
	for _, d := range ds {
		stagger = max(stagger, ld.FirstAsked(d).Sub(ld.FirstAsked()))
	}
	crossing := 0.0
	if warm {
		crossing = c.Rate * harness.LANInterval.Seconds()
	}
	underLimit := 2 + c.Rate*stagger.Seconds() + float64(v.Unanswered) + crossing
	if behind := -v.Low; float64(behind) > underLimit {
		t.Errorf("served %d fewer by %.2fs than one bucket would have of the same queries, over the bound %.1f: two tokens, %.1f for the nodes' first queries %v apart, %d queries unanswered, %.0f for a report crossing a warm answer (%d served of the ideal %d over the whole run)",
			behind, v.LowAt.Seconds(), underLimit, c.Rate*stagger.Seconds(), stagger, v.Unanswered, crossing, v.Served, v.Ideal)
	}
	t.Logf("figures: %s: served %d in %.1fs with %d restarts (warm start %v, %s): %.0f over b + r*T = %.0f, %.1f per restart (a burst is %d, an interval's worth r*I %.0f); bound of %d nodes %.0f, with one interval's worth per restart and the %d hits killed nodes never reported %.0f; one bucket would have served %d of the %d queries asked: over %d, under %d; served - ideal from the start lowest %d at %.2fs (bound -%.1f), highest %d at %.2fs; %d unanswered",
		t.Name(), served, ld.Duration().Seconds(), restarts, warm, sigName(sig), float64(served)-oneBucket, oneBucket,
		(float64(served)-oneBucket)/float64(restarts), c.Burst, c.Rate*harness.LANInterval.Seconds(), n, base, unreported, limit,
		v.Ideal, v.Queries, v.Over(), v.Under(), v.Low, v.LowAt.Seconds(), underLimit, v.High, v.HighAt.Seconds(), v.Unanswered)
}
