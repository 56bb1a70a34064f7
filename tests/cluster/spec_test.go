package cluster

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file plays the worked example's A/B timeline (docs/protocol.md,
// "The worked example") against two real dthrottled processes on the
// built-in defaults, warm start included, started apart as real machines
// are. internal/daemon's TestSpecTimelineOnFakeTime plays it on fake
// time, at exact instants and levels.

// specConfig is the example's policy: burst 10, rate 1, reports every
// 5 s. Everything else is left to the defaults; the admin endpoint is
// there to read the levels.
const specConfig = `
[listen]
unix = "%SOCK%"
[limit]
rate = 1.0
burst = 10
[gossip]
interval = "5s"
group = "239.255.77.77:7777"
[admin]
http = "127.0.0.1:0"
`

// specLate is how late a step of the timeline may end. Every decision is
// checked at least 0.2 s (0.2 tokens) away from a boundary, and levels
// are compared at the instant they were read.
const specLate = 150 * time.Millisecond

// specTag is the example's client C.
const specTag = "C"

// specClock places the timeline's steps at instants relative to T0, the
// example's t=0.1 (C's burst).
type specClock struct {
	t  *testing.T
	t0 time.Time
}

// rel names an instant relative to T0, as the messages give it.
func (c specClock) rel(at time.Time) string {
	return fmt.Sprintf("T0%+.3fs", at.Sub(c.t0).Seconds())
}

// wait sleeps until T0+off. The steps of the timeline happen at set
// instants, as the example's do; the test never waits here for a
// state, it polls for one with a deadline.
func (c specClock) wait(off time.Duration) {
	time.Sleep(time.Until(c.t0.Add(off)))
}

// refillAt is when C's bucket holds a token again, and boundary how far
// from it a decision is checked.
const (
	refillAt = 9 * time.Second
	boundary = 200 * time.Millisecond
)

// before fails the test when the step ended after T0+by, past which its
// outcome no longer says anything about the daemon.
func (c specClock) before(step string, by time.Duration) {
	c.t.Helper()
	if at := c.t0.Add(by); time.Now().After(at) {
		c.t.Fatalf("%s ended at %s, after %s: this machine is too slow for the timeline's margins",
			step, c.rel(time.Now()), c.rel(at))
	}
}

// onTime fails the test when the step meant for T0+off ended more than
// specLate after that instant: past it, the margins no longer hold and a
// failure would say nothing about the daemon.
func (c specClock) onTime(step string, off time.Duration) {
	c.t.Helper()
	at := c.t0.Add(off)
	if late := time.Since(at); late > specLate {
		c.t.Fatalf("%s, meant for %s, ended %v late (at most %v): this machine is too slow for the timeline's margins",
			step, c.rel(at), late.Round(time.Millisecond), specLate)
	}
}

// specNode is one of the example's two nodes.
type specNode struct {
	name  string
	d     *harness.Daemon
	start time.Time // when the process was started
	up    time.Time // when it answered on its socket
	spent time.Time // when C's burst was sent to it
}

// stats reads the node's /v1/stats.
func (n *specNode) stats(t *testing.T) api.Stats {
	t.Helper()
	code, body := harness.HTTPDo(t, http.MethodGet, "http://"+n.d.AdminAddr(t)+"/v1/stats")
	var st api.Stats
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/stats on %s: %d %v: %s", n.name, code, err, body)
	}
	return st
}

// level reads C's bucket on the node and the instant it was read (the
// middle of the request).
func (n *specNode) level(t *testing.T) (float64, time.Time) {
	t.Helper()
	before := time.Now()
	v := n.d.Tag(t, specTag)
	return v.Tokens, before.Add(time.Since(before) / 2)
}

// decide asks the node one query of C at step and checks the answer is
// want, with C's level read just before for the message.
func (n *specNode) decide(t *testing.T, c specClock, step string, want bool) {
	t.Helper()
	tokens, at := n.level(t)
	if got := harness.Ask(t, n.d.Sock, specTag); got != want {
		t.Errorf("%s: %s answered %s at %s with %.3f tokens just before, want %s",
			step, n.name, okNO(got), c.rel(at), tokens, okNO(want))
	}
}

// okNO is a decision as the daemon writes it.
func okNO(ok bool) string {
	if ok {
		return "OK"
	}
	return "NO"
}

// TestSpecTimelineRealDaemons: A starts, B 0.3 s later; at T0 (A's start
// + 1.3 s) C's burst sends 11 queries to A, the example's 9 and then 2
// of which the second is refused, and 8 to B. A reports at its start + 5
// s, B at its own. A, warming still when B starts (nobody answered it),
// asks again at its start + 5 s, amid its first report, and B answers:
// where levels cross between nodes, each hit must count once. Both nodes
// then hold the example's level (-8+5 at its t=5.1, -3.5 at T0+4.5),
// refuse at T0+5.2 and until T0+9, and serve C again after.
func TestSpecTimelineRealDaemons(t *testing.T) {
	harness.Alone(t)
	if !netns.Run(t) {
		return
	}
	aStart := time.Now()
	c := specClock{t: t, t0: aStart.Add(1300 * time.Millisecond)}
	a := &specNode{name: "A", d: harness.StartDaemon(t, specConfig), start: aStart, up: time.Now()}
	c.onTime("A answering on its socket", -time.Second)

	c.wait(-time.Second)
	b := &specNode{name: "B", start: time.Now()}
	b.d = harness.StartDaemon(t, specConfig)
	b.up = time.Now()
	// B's reports and warm start run from its process start: all its
	// socket's answer must do is come before C's burst.
	c.before("B answering on its socket", 0)
	nodes := []*specNode{a, b}
	for _, n := range nodes {
		n.d.AdminAddr(t)
		t.Logf("%s started at %s, answering on its socket %v later", n.name, c.rel(n.start),
			n.up.Sub(n.start).Round(time.Millisecond))
	}
	if w := a.stats(t).Gossip.Warm; !w.Warming || w.PeersAnswered != 0 {
		t.Fatalf("A before T0: warm start %+v, want warming with no answer (nobody was up to answer its request)", w)
	}

	// T0, the example's t=0.1 and t=0.2: A serves 10 and refuses the
	// 11th; B serves 8.
	c.wait(0)
	for _, s := range []struct {
		n    *specNode
		sent int
		want string
	}{
		{a, 11, strings.Repeat("OK\n", 10) + "NO\n"},
		{b, 8, strings.Repeat("OK\n", 8)},
	} {
		s.n.spent = time.Now()
		if got := harness.Pipeline(t, s.n.d.Sock, strings.Repeat(specTag+"\n", s.sent)); got != s.want {
			t.Fatalf("T0: %d queries of C on %s: %d OK, %d NO (%q), want %q",
				s.sent, s.n.name, strings.Count(got, "OK"), strings.Count(got, "NO"), got, s.want)
		}
	}
	c.onTime("C's burst", 0)

	// T0+4.5, the example's t=5.1 plus 0.4 s of refill: both reports
	// are in and both buckets hold C's global count, -8+5 then refilled
	// to -3.5.
	const levelsAt = 4500 * time.Millisecond
	c.wait(levelsAt)
	for _, n := range nodes {
		if r := n.d.LastReport(t); !r.After(n.spent) {
			t.Fatalf("T0+4.5: %s has not reported since C's burst (last report at %s; it reports every 5 s from its start at %s)",
				n.name, c.rel(r), c.rel(n.start))
		}
	}
	for _, n := range nodes {
		tokens, at := n.level(t)
		// -3.5 at T0+4.5 after this node's burst, moved by the refill
		// between that instant and the read.
		want := -3.5 + (at.Sub(n.spent) - levelsAt).Seconds()
		t.Logf("T0+4.5: C on %s holds %.3f tokens at %s (the example's arithmetic: -3.5 at T0+4.5, %.3f at the read)",
			n.name, tokens, c.rel(at), want)
		if math.Abs(tokens-want) > 0.15 {
			t.Errorf("T0+4.5: C on %s holds %.3f tokens at %s, want %.3f ± 0.15 (-3.5 at T0+4.5; lower: hits counted twice, higher: hits not counted)",
				n.name, tokens, c.rel(at), want)
		}
	}
	c.before("reading the levels", refillAt-boundary) // while C's level rises as a line

	// The example's t=5.2 and on: both refuse while C's bucket
	// refills, and serve once it holds a token again, at T0+9.
	// Each step must end while its answer still holds: a refusal before
	// T0+9, less the margin; once C is served again, it stays served.
	for _, st := range []struct {
		name string
		off  time.Duration
		want bool
		by   time.Duration // 0: the answer holds however late
	}{
		{"T0+5.2 (the example's t=5.2)", 5200 * time.Millisecond, false, refillAt - boundary},
		{"T0+8.8 (0.8 tokens, not yet one)", 8800 * time.Millisecond, false, refillAt - boundary + specLate},
		{"T0+9.3 (both serve C again)", 9300 * time.Millisecond, true, 0},
	} {
		c.wait(st.off)
		for _, n := range nodes {
			n.decide(t, c, st.name, st.want)
		}
		if st.by != 0 {
			c.before(st.name, st.by)
		}
	}

	// Both warm starts are over, each with an answer: B's from A at its
	// start, A's from B when it asked again.
	for _, n := range nodes {
		var w api.Warm
		testkit.WaitFor(t, 5*time.Second, n.name+"'s warm start to be done", func() bool {
			w = n.stats(t).Gossip.Warm
			return w.Warm
		})
		t.Logf("%s warm start: %d requests sent, %d peers answered, %d tags adopted, %.3fs", n.name,
			w.RequestsSent, w.PeersAnswered, w.TagsAdopted, w.Seconds)
		if w.PeersAnswered < 1 {
			t.Errorf("%s's warm start ended with no peer's answer: %+v", n.name, w)
		}
	}
	if w := a.stats(t).Gossip.Warm; w.RequestsSent < 2 {
		t.Errorf("A sent %d snapshot requests, want a second one once B was up: the timeline missed the case it plays", w.RequestsSent)
	}
}
