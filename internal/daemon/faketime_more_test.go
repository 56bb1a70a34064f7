package daemon

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip"
)

// This file adds to the harness of faketime_test.go what the ports of
// tests/cluster need besides: queries asked many at a time, a node's
// peers view by id, a node killed and restarted, a daemon's log kept for
// the test to read, and a load that records every query it asks.

// askN asks count queries of tag on the node, one after the other, and
// returns how many were served.
func (n *fakeNode) askN(t testing.TB, tag string, count int) int {
	t.Helper()
	ok := 0
	for range count {
		if n.ask(t, tag) {
			ok++
		}
	}
	return ok
}

// peer is the node's view of the peer with gossip id id, and whether it
// has one.
func (n *fakeNode) peer(id uint64) (gossip.PeerInfo, bool) {
	for _, p := range n.peers() {
		if p.Node == id {
			return p, true
		}
	}
	return gossip.PeerInfo{}, false
}

// fakeQuery is one query a load asked: when, of which node of its
// cluster (by index), and whether it was served.
type fakeQuery struct {
	at   time.Time
	node int
	ok   bool
}

// runLoadQueries is runLoad, with every query it asked in order. A query
// takes no fake time (the test and the daemon talk over a net.Pipe, and
// the clock moves only once both wait), and the load asks one at each
// tick of its ticker: so a query was served exactly when its node served
// one at its instant.
func runLoadQueries(t *testing.T, c fakeCluster, tag string, dur time.Duration, perSecond int, down func(i int) bool) (*fakeLoad, []fakeQuery) {
	t.Helper()
	var qs []fakeQuery
	l := runLoad(t, c, tag, dur, perSecond, func(i int) bool {
		if down != nil && down(i) {
			return true
		}
		qs = append(qs, fakeQuery{at: time.Now(), node: i})
		return false
	})
	served := make([]map[time.Time]bool, len(c))
	for i, oks := range l.ok {
		served[i] = map[time.Time]bool{}
		for _, at := range oks {
			served[i][at] = true
		}
	}
	for i := range qs {
		qs[i].ok = served[qs[i].node][qs[i].at]
	}
	return l, qs
}
