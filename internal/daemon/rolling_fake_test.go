package daemon

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestRollingRestartOnFakeTime is tests/cluster's TestRollingRestart on
// fake time: one tag hammered at 20x its rate (rate 20/s, burst 10, 400
// queries a second, round robin) across four daemons reporting every 200
// ms, while each is restarted in turn, 1.5 s apart, with warm start on
// (the default) and off, stopping each cleanly or killing it (cut off
// from the network first: its last report and its goodbye reach no one).
// A restart waits, up to rollingWait, until its node holds hits it has
// not reported, so that a kill loses some; the node is then down for
// restartDown, skipped at its turns, and comes back between two of the
// load's ticks, as a real process comes back at an instant of its own.
// Each run logs a "figures:" line (go test -v) for the README's table.
//
// The bounds are the real test's (its comment derives them), tighter: on
// this network's delivery delay d instead of the 100 ms a busy machine
// is allowed, with no query left unanswered (a query takes no fake time,
// so none is in flight at a stop), and with warm start one interval's
// worth for the end of the run in place of the real test's burst of
// slack for a busy machine's scheduling:
//
//   - over-admission: at most the cluster bound of four nodes, plus one
//     interval's worth of the rate, r*(I+d), per restart and what each
//     killed node served and never reported;
//   - with warm start, at most b + r*T plus the same, and r*(I+d) more:
//     the hits served in the last interval and delivery of the run are
//     not yet known where the next queries are decided;
//   - under-admission: at every query from the load's start, behind one
//     bucket fed the very same queries (ideal_test.go) by at most 2 +
//     r*stagger, plus r*I with warm start.
func TestRollingRestartOnFakeTime(t *testing.T) {
	for _, warm := range []bool{true, false} {
		for _, kill := range []bool{false, true} {
			how := "term"
			if kill {
				how = "kill"
			}
			t.Run(fmt.Sprintf("warm=%v/%s", warm, how), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) { rollingOnFakeTime(t, warm, kill, how) })
			})
		}
	}
}

const (
	rollingRate     = 20
	rollingBurst    = 10
	rollingInterval = 200 * time.Millisecond
	rollingLoad     = 400                     // queries a second, over all nodes: 20x the rate
	rollingEvery    = 1500 * time.Millisecond // between restarts
	restartDown     = 100 * time.Millisecond  // a restarted node is down this long
	// rollingWait is the longest a restart waits, past its instant, for
	// its node to hold hits it has not reported, so that a kill loses
	// some: at 20x the rate the nodes take turns at serving.
	rollingWait = 750 * time.Millisecond
	// rollingDelay is the network's delivery delay, the same for every
	// datagram, so that none overtakes another, as on a bridge. With
	// jitter, the two datagrams of a warm start answer overtake each
	// other half the time, and an answer whose last datagram arrives
	// first is taken as whole, its levels dropped as duplicates
	// (internal/gossip/warm, Warm.ReceiveAnswer): the restarted node then
	// serves from a fresh bucket, past the warm bound.
	rollingDelay = fakeDelay
	// restartOffGrid puts a node's start between two of the load's
	// ticks (every 2.5 ms): its reports then never fall at the instant
	// of a query, whose order against the report would be the
	// scheduler's to pick.
	restartOffGrid = 1250 * time.Microsecond
)

// rollingOnFakeTime is one run of TestRollingRestartOnFakeTime.
func rollingOnFakeTime(t *testing.T, warm, kill bool, how string) {
	// In order: see rollingDelay.
	mem := transport.NewMemNetwork(transport.MemConfig{Delay: rollingDelay}, nil)
	mem.DeliverOnTime()
	more := ""
	if !warm {
		more = "warm_start = false\n"
	}
	text := fakeConfig(rollingRate, rollingBurst, rollingInterval, true, more)
	var specs []fakeSpec
	for i := range 4 {
		specs = append(specs, fakeSpec{name: fmt.Sprintf("n%d", i+1), text: text, net: mem})
	}
	c := startCluster(t, rollingInterval, specs)
	c.awaitPeers(t, len(c)-1, 2*rollingInterval)
	// The load's ticks off every node's report instants, as restartOffGrid
	// keeps them for the restarted nodes.
	time.Sleep(time.Millisecond)

	type killed struct {
		node        int
		last, until time.Time
	}
	var kills []killed
	down := make([]bool, len(c))
	next := 0            // the next node to restart
	var downAt time.Time // when it went down
	start := time.Now()
	dur := time.Duration(len(c)+1) * rollingEvery
	l, qs := runLoadQueries(t, c, "rolling", dur, rollingLoad, func(i int) bool {
		if next < len(c) {
			at := time.Duration(next+1) * rollingEvery
			switch el := time.Since(start); {
			case !down[next] && el >= at && (c[next].tagView("rolling").Unreported > 0 || el >= at+rollingWait):
				n := c[next]
				if kill {
					kills = append(kills, killed{next, n.gossip.node.Stats().LastReport, time.Now()})
					n.kill()
				} else {
					n.stop()
				}
				down[next], downAt = true, time.Now()
			case down[next] && time.Since(downAt) >= restartDown:
				time.Sleep(restartOffGrid)
				c[next] = startFake(t, specs[next])
				down[next] = false
				next++
				return true // this tick's instant has passed
			}
		}
		return down[i]
	})
	if next != len(c) {
		t.Fatalf("%d of %d nodes restarted", next, len(c))
	}
	// What a killed node served since its last report is lost with it:
	// no peer ever applies those hits.
	unreported := 0
	for _, k := range kills {
		for _, at := range l.ok[k.node] {
			if !at.Before(k.last) && at.Before(k.until) {
				unreported++
			}
		}
	}
	if kill && unreported == 0 {
		t.Fatal("the kills lost no hit: no node killed had served since its last report")
	}
	n, restarts := len(c), len(c)
	base := clusterBound(n, rollingRate, rollingBurst, rollingInterval, rollingDelay, l.duration())
	perRestart := rollingRate * (rollingInterval + rollingDelay).Seconds()
	limit := base + float64(restarts)*perRestart + float64(unreported)
	served := l.served()
	if float64(served) > limit {
		t.Errorf("served %d, over the bound %.0f for %d nodes plus one interval's worth (%.1f) per restart and the %d hits killed nodes never reported (%.1f)",
			served, base, n, perRestart, unreported, limit)
	}
	oneBucket := rollingBurst + rollingRate*l.duration().Seconds()
	if warmLimit := oneBucket + float64(restarts+1)*perRestart + float64(unreported); warm && float64(served) > warmLimit {
		t.Errorf("served %d with warm start: over b + r*T = %.1f plus one interval's worth per restart and at the end, and the hits never reported (%.1f)",
			served, oneBucket, warmLimit)
	}
	v := compareIdeal(l.start, rollingBurst, rollingRate, qs)
	first := map[int]time.Time{}
	for _, q := range qs {
		if _, ok := first[q.node]; !ok {
			first[q.node] = q.at
		}
	}
	var stagger time.Duration // from the first query to the last node's first
	for _, at := range first {
		stagger = max(stagger, at.Sub(qs[0].at))
	}
	crossing := 0.0
	if warm {
		crossing = rollingRate * rollingInterval.Seconds()
	}
	underLimit := 2 + rollingRate*stagger.Seconds() + crossing
	if behind := -v.low; float64(behind) > underLimit {
		t.Errorf("served %d fewer by %.3fs than one bucket would have of the same queries, over the bound %.2f: two tokens, %.2f for the nodes' first queries %v apart, %.0f for a report crossing a warm answer (%d served of the ideal %d over the whole run)",
			behind, v.lowAt.Seconds(), underLimit, rollingRate*stagger.Seconds(), stagger, crossing, v.served, v.ideal)
	}
	t.Logf("figures: %s: served %d in %.3fs with %d restarts (warm start %v, %s): %.1f over b + r*T = %.1f, %.1f per restart (a burst is %d, an interval's worth r*I %.0f); bound of %d nodes %.1f, with one interval's worth per restart and the %d hits killed nodes never reported %.1f; one bucket would have served %d of the %d queries asked: over %d, under %d; served - ideal from the start lowest %d at %.3fs (bound -%.2f), highest %d at %.3fs",
		t.Name(), served, l.duration().Seconds(), restarts, warm, how, float64(served)-oneBucket, oneBucket,
		(float64(served)-oneBucket)/float64(restarts), rollingBurst, rollingRate*rollingInterval.Seconds(), n, base, unreported, limit,
		v.ideal, v.queries, v.over(), v.under(), v.low, v.lowAt.Seconds(), underLimit, v.high, v.highAt.Seconds())
}
