package tests

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
)

// TestRollingRestart hammers one tag at 20x its rate across four daemons
// on a bridge while each is restarted in turn, with warm start on (the
// default) and off, stopping each cleanly (SIGTERM) or killing it
// (SIGKILL). A restarted daemon without warm start hands the tag a fresh
// burst; with it, it asks its peers and takes their lower bucket within
// about an interval. The served count is held to the cluster bound of four
// nodes plus, per restart, one interval's worth of the tag's rate and what
// a killed node served and never reported; each run logs a "figures:"
// line for README's Warm start section.
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
	c := faultPolicy
	if !warm {
		c.gossip = "warm_start = false\n"
	}
	l := newLAN(t, 4)
	l.startAll(t, c)
	const every = 1500 * time.Millisecond // between restarts
	ld := startLoad(l.hosts, "rolling", time.Duration(len(l.hosts)+1)*every)
	type killed struct {
		d           *daemon
		last, until time.Time
	}
	var kills []killed
	for i, h := range l.hosts {
		at(ld, time.Duration(i+1)*every)
		d := h.daemon()
		if sig == syscall.SIGKILL {
			// What it served since its last report is lost with it:
			// no peer ever applies those hits (counted once the load is
			// over: its record is the load goroutine's until then).
			last := d.lastReport(t)
			h.kill(t)
			kills = append(kills, killed{d, last, time.Now()})
		} else {
			h.mu.Lock()
			h.d = nil
			h.mu.Unlock()
			d.stop(t)
		}
		h.restart(t)
	}
	ld.wait(t, 2*len(l.hosts)) // queries in flight at a stop may fail
	unreported := 0
	for _, k := range kills {
		unreported += ld.servedIn(k.last, k.until, k.d)
	}
	restarts := len(l.hosts)
	n := len(l.hosts)
	base := bound(n, c, faultDelay, ld.duration())
	perRestart := c.rate * (lanInterval + faultDelay).Seconds()
	limit := base + float64(restarts)*perRestart + float64(unreported)
	served := ld.served()
	if float64(served) > limit {
		t.Errorf("served %d, over the bound %.0f for %d nodes plus one interval's worth (%.0f) per restart and the %d hits killed nodes never reported (%.0f)",
			served, base, n, perRestart, unreported, limit)
	}
	// With warm start, a restart adds at most an interval's worth to what
	// one bucket would serve (b + r*T), with one burst of slack for the
	// scheduling of a busy machine; without, a burst per restart.
	ideal := float64(c.burst) + c.rate*ld.duration().Seconds()
	if warmLimit := ideal + float64(restarts)*perRestart + float64(unreported) + float64(c.burst); warm && float64(served) > warmLimit {
		t.Errorf("served %d with warm start: over b + r*T = %.0f plus one interval's worth per restart, the hits never reported and one burst (%.0f)",
			served, ideal, warmLimit)
	}
	t.Logf("figures: %s: served %d in %.1fs with %d restarts (warm start %v, %s): %.0f over b + r*T = %.0f, %.1f per restart (a burst is %d, an interval's worth r*I %.0f); bound of %d nodes %.0f, with one interval's worth per restart and the %d hits killed nodes never reported %.0f",
		t.Name(), served, ld.duration().Seconds(), restarts, warm, sigName(sig), float64(served)-ideal, ideal,
		(float64(served)-ideal)/float64(restarts), c.burst, c.rate*lanInterval.Seconds(), n, base, unreported, limit)
}
