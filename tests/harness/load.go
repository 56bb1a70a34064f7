package harness

import (
	"net"
	"slices"
	"testing"
	"time"
)

// This file owns the load the fault tests (tests/faults' repair_test.go,
// partition_test.go and segments_test.go) hammer a tag with: when each
// query was served, and the counts over windows that the
// bounds are checked against.

// Load queries one tag on a cluster's hosts in turn, at a steady rate
// (faultLoad a second unless told otherwise), one query in flight over a
// connection per daemon, and records when each query was served. A host
// that is down is skipped at its turn (no query is asked).
type Load struct {
	Start, End time.Time // end: the last reply
	dur        time.Duration
	done       chan struct{}
	// Written by the load's goroutine, read after done.
	ok     map[*Daemon][]time.Time // when each OK arrived, per daemon
	failed int                     // queries to a running daemon that failed
}

// StartLoad hammers tag on hosts for dur, faultLoad queries a second.
func StartLoad(hosts []*Host, tag string, dur time.Duration) *Load {
	return StartLoadAt(hosts, tag, dur, FaultLoad)
}

// StartLoadAt hammers tag on hosts for dur, perSecond queries a second.
func StartLoadAt(hosts []*Host, tag string, dur time.Duration, perSecond int) *Load {
	l := &Load{Start: time.Now(), dur: dur, done: make(chan struct{}), ok: map[*Daemon][]time.Time{}}
	go func() {
		defer close(l.done)
		conns := map[*Daemon]net.Conn{}
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; time.Since(l.Start) < dur; i++ {
			<-tick.C
			if d := hosts[i%len(hosts)].Daemon(); d != nil {
				l.query(conns, d, tag)
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	return l
}

// query asks d for tag over its connection in conns, dialling one if
// needed and dropping it on error.
func (l *Load) query(conns map[*Daemon]net.Conn, d *Daemon, tag string) {
	defer func() { l.End = time.Now() }()
	c := conns[d]
	var err error
	if c == nil {
		if c, err = net.DialTimeout("unix", d.Sock, time.Second); err != nil {
			l.failed++
			return
		}
		conns[d] = c
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	reply := make([]byte, 3)
	if _, err = c.Write([]byte(tag + "\n")); err == nil {
		_, err = ReadFull(c, reply)
	}
	switch {
	case err != nil || (string(reply) != "OK\n" && string(reply) != "NO\n"):
		l.failed++
		c.Close()
		delete(conns, d)
	case string(reply) == "OK\n":
		l.ok[d] = append(l.ok[d], time.Now())
	}
}

// Wait waits for the load to end and checks that at most mayFail queries
// to a running daemon failed (one may race with a kill).
func (l *Load) Wait(t *testing.T, mayFail int) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(time.Until(l.Start.Add(l.dur + time.Minute))):
		t.Fatalf("load generator did not stop a minute after its %v", l.dur)
	}
	if l.failed > mayFail {
		t.Errorf("%d queries to running daemons failed", l.failed)
	}
}

// ServedIn is how many queries ds (all daemons if none) served in [from, to).
func (l *Load) ServedIn(from, to time.Time, ds ...*Daemon) int {
	n := 0
	for d, oks := range l.ok {
		if len(ds) > 0 && !slices.Contains(ds, d) {
			continue
		}
		for _, at := range oks {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
	}
	return n
}

// Served is how many queries ds (all daemons if none) served.
func (l *Load) Served(ds ...*Daemon) int { return l.ServedIn(l.Start, l.End.Add(time.Second), ds...) }

// Most is the most the cluster served in any window of w.
func (l *Load) Most(w time.Duration) int { return l.MostIn(w) }

// MostIn is the most ds (all daemons if none) served in any window of w.
func (l *Load) MostIn(w time.Duration, ds ...*Daemon) int {
	var all []time.Time
	for d, oks := range l.ok {
		if len(ds) == 0 || slices.Contains(ds, d) {
			all = append(all, oks...)
		}
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range all {
		for all[i].Sub(all[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Duration is the time from the first query to the last reply.
func (l *Load) Duration() time.Duration { return l.End.Sub(l.Start) }

// Figures logs one scenario's results for the tables of docs/reliability.md
// and docs/relays.md.
func Figures(t *testing.T, l *Load, limit float64, extra string, c Counters) {
	t.Helper()
	w := l.Duration()
	t.Logf("figures: %s: served %d in %.1fs (%.1f/s) against a bound of %.0f; most in any 1s %d; %s; counters over all nodes: %v",
		t.Name(), l.Served(), w.Seconds(), float64(l.Served())/w.Seconds(), limit, l.Most(time.Second), extra, c)
}

// At waits until offset after the load started, to time a fault.
func At(l *Load, offset time.Duration) time.Time {
	<-time.After(time.Until(l.Start.Add(offset)))
	return time.Now()
}
