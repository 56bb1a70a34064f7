package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// "Who is throttled" across a cluster: three real daemons, each on a host
// of its own on the bridge of newLAN, gossiping signed reports every
// lanInterval, and their GET /v1/top. Each node feeds its board at every
// report, sends the board's lists to its peers with that report (wire
// type 9) while it has anything to tell, and counts a peer's lists until
// they are gossip.SilentAfter(interval) old.

// The policy under test and the tag it refuses.
const (
	topPolicyName = "clients"
	topTag        = "203.0.113.9"
	topBurst      = 3
)

// topPolicy limits topTag to a burst of topBurst that refills a token
// every 1000 s: past it, every query for the tag in the test is refused.
var topPolicy = fmt.Sprintf(`
[[policy]]
name = %q
prefix = "203.0.113."
rate = 0.001
burst = %d
`, topPolicyName, topBurst)

// topSlack is the harvest's share of the bounds: the HTTP read and the
// 10 ms poll on top of the report that carries the counts.
const topSlack = 100 * time.Millisecond

// topListed reports whether any policy of doc lists tag.
func topListed(doc api.Top, tag string) bool {
	for _, p := range doc.Policies {
		if _, ok := harness.TopFind(doc, p.Policy, tag); ok {
			return true
		}
	}
	return false
}

// topHolds reports whether doc lists tag under policy with a count whose
// range [Count-Error, Count] holds n, the true count.
func topHolds(doc api.Top, policy, tag string, n uint64) bool {
	tt, ok := harness.TopFind(doc, policy, tag)
	return ok && tt.Error <= tt.Count && tt.Count-tt.Error <= n && n <= tt.Count
}

// topAwait polls the query q on every daemon of ds every 10 ms until cond
// holds for each, and fails t if one still does not hold it at deadline.
// It returns, per daemon, how long after from cond was first seen.
func topAwait(t *testing.T, ds []*harness.Daemon, names []string, q string, from, deadline time.Time, what string, cond func(api.Top) bool) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(ds))
	last := make([]api.Top, len(ds))
	left := len(ds)
	for {
		for i, d := range ds {
			if took[i] != 0 {
				continue
			}
			last[i] = harness.TopView(t, d, q)
			if cond(last[i]) {
				took[i] = max(time.Since(from), time.Nanosecond)
				left--
			}
		}
		if left == 0 {
			return took
		}
		if time.Now().After(deadline) {
			for i := range ds {
				if took[i] == 0 {
					t.Errorf("%s: node %s, %v after the start, /v1/top?%s still %+v", what, names[i], time.Since(from), q, last[i])
				}
			}
			t.FailNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTopCluster: refusals on one node show, with their exact count
// within the stated error, in the cluster view of every node within two
// intervals, in that node's own view only, and are forgotten by the others
// once its last report expired.
func TestTopCluster(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	l := harness.NewLAN(t, 3)
	secret := filepath.Join(t.TempDir(), "secret")
	harness.Must(t, os.WriteFile(secret, []byte("the cluster's secret, 32 bytes.."), 0o600))
	ds := l.StartAll(t, harness.NodeConfig{Rate: 0.001, Burst: 1000, Secret: secret, Policies: topPolicy})
	a, b, c := ds[0], ds[1], ds[2]
	names := []string{"A", "B", "C"}
	t.Cleanup(func() {
		if t.Failed() {
			for i, d := range ds {
				t.Logf("node %s log:\n%s", names[i], strings.TrimSpace(d.Stderr.String()))
			}
		}
	})
	expire := gossip.SilentAfter(harness.LANInterval)
	cluster := "by=refused&scope=cluster&policy=" + topPolicyName

	// Nothing served or refused anywhere: no node has a list, so none
	// sends one, and each counts itself alone.
	for i, d := range ds {
		for _, q := range []string{"by=refused&scope=cluster", "by=served&scope=cluster"} {
			if doc := harness.TopView(t, d, q); doc.Nodes != 1 || len(doc.Policies) != 0 {
				t.Errorf("node %s before any query, /v1/top?%s: %+v, want nodes 1 and no policies", names[i], q, doc)
			}
		}
	}

	// 1. On A only: the burst served, then refusals, each one counted.
	var served, refused uint64
	for refused < 4 {
		if harness.Ask(t, a.Sock, topTag) {
			served++
		} else {
			refused++
		}
		if served+refused > 100 {
			t.Fatalf("%s served %d times on A, refused %d: the policy does not limit it", topTag, served, refused)
		}
	}
	lastRefusal := time.Now()
	if served != topBurst {
		t.Fatalf("A served %s %d times before refusing it, want its burst of %d", topTag, served, topBurst)
	}

	// 2. A refusal is harvested into A's board at A's next report, at
	// most one interval later, and that report carries A's list to B and
	// C. So every node's cluster view holds the exact count within two
	// intervals (one of which is margin for a late tick and the datagram's
	// way) plus topSlack.
	bound := 2*harness.LANInterval + topSlack
	took := topAwait(t, ds, names, cluster, lastRefusal, lastRefusal.Add(bound),
		fmt.Sprintf("%s's %d refusals within %v", topTag, refused, bound),
		func(doc api.Top) bool { return topHolds(doc, topPolicyName, topTag, refused) })
	t.Logf("%d refusals of %s in the cluster view of A, B, C after %v (bound %v)", refused, topTag, took, bound)

	// 3. Only A refused it: A's own view lists it, B's and C's list
	// nothing refused.
	if doc := harness.TopView(t, a, "by=refused&scope=node"); doc.Nodes != 1 || !topHolds(doc, topPolicyName, topTag, refused) {
		t.Errorf("A's node view: %+v, want %s with %d refusals, nodes 1", doc, topTag, refused)
	}
	for i, d := range []*harness.Daemon{b, c} {
		if doc := harness.TopView(t, d, "by=refused&scope=node"); doc.Nodes != 1 || len(doc.Policies) != 0 {
			t.Errorf("%s's node view: %+v, want nothing refused, nodes 1", names[i+1], doc)
		}
	}

	// 4. A node sends its lists only when it has something to tell (or
	// once more after they emptied), and a peer counts in Nodes while
	// its lists are fresh. So far only A has anything: B and C count A
	// and themselves, A counts itself alone.
	for i, d := range ds {
		want := 2
		if d == a {
			want = 1
		}
		if doc := harness.TopView(t, d, cluster); doc.Nodes != want {
			t.Errorf("node %s's cluster view with only A telling: nodes %d, want %d", names[i], doc.Nodes, want)
		}
	}
	// One served query on B and one on C give each a list of served
	// hits, which its next report carries: then every node counts all
	// three, within the bound of step 2.
	for i, d := range []*harness.Daemon{b, c} {
		if !harness.Ask(t, d.Sock, "only-"+names[i+1]) {
			t.Fatalf("%s refused its first query of a tag of its own", names[i+1])
		}
	}
	lastServed := time.Now()
	took = topAwait(t, ds, names, "by=served&scope=cluster", lastServed, lastServed.Add(bound),
		"every node counting all three", func(doc api.Top) bool {
			return doc.Nodes == 3 &&
				topHolds(doc, topPolicyName, topTag, topBurst) &&
				topHolds(doc, "default", "only-B", 1) &&
				topHolds(doc, "default", "only-C", 1)
		})
	t.Logf("nodes 3 and B's and C's served hits in every cluster view after %v (bound %v)", took, bound)
	for i, d := range ds {
		if doc := harness.TopView(t, d, cluster); doc.Nodes != 3 || !topHolds(doc, topPolicyName, topTag, refused) {
			t.Errorf("node %s's cluster view once all told: %+v, want nodes 3 and %s with %d refusals", names[i], doc, topTag, refused)
		}
	}

	// 5. Stop A. Its last report, sent as it stops, still counts on B and
	// C right after; it expires there expire after it arrived, before
	// A's exit, so by expire plus topSlack after the exit both have
	// dropped A: the tag is gone and they count each other alone.
	a.Stop(t)
	stopped := time.Now()
	rest, restNames := []*harness.Daemon{b, c}, names[1:]
	for i, d := range rest {
		if doc := harness.TopView(t, d, cluster); !topHolds(doc, topPolicyName, topTag, refused) {
			t.Errorf("%s's cluster view right after A stopped: %+v, want A's last report still counted", restNames[i], doc)
		}
	}
	took = topAwait(t, rest, restNames, cluster, stopped, stopped.Add(expire+topSlack),
		fmt.Sprintf("A's report expired (expire %v)", expire), func(doc api.Top) bool {
			return doc.Nodes == 2 && !topListed(doc, topTag)
		})
	t.Logf("A's report dropped on B, C %v after A stopped (expire %v)", took, expire)
}
