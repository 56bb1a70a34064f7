package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// "Who is throttled" across a cluster (tests/cluster's TestTopCluster) on
// fake time: three daemons gossiping signed reports every 200 ms, and
// their views (what GET /v1/top serves). Each node feeds its board at
// every report, sends the board's lists to its peers with that report
// while it has anything to tell, and counts a peer's lists until they
// are gossip.SilentAfter(interval) old.

// The policy under test and the tag it refuses.
const (
	topPolicyName = "clients"
	topTag        = "203.0.113.9"
	topBurst      = 3
)

// topPolicyText limits topTag to a burst of topBurst that refills a token
// every 1000 s: past it, every query for the tag in the test is refused.
var topPolicyText = fmt.Sprintf("[[policy]]\nname = %q\nprefix = \"203.0.113.\"\nrate = 0.001\nburst = %d\n", topPolicyName, topBurst)

// topListed reports whether any policy of doc lists tag.
func topListed(doc api.Top, tag string) bool {
	for _, p := range doc.Policies {
		if _, ok := doc.Find(p.Policy, tag); ok {
			return true
		}
	}
	return false
}

// topHolds reports whether doc lists tag under policy with a count whose
// range [Count-Error, Count] holds n, the true count.
func topHolds(doc api.Top, policy, tag string, n uint64) bool {
	tt, ok := doc.Find(policy, tag)
	return ok && tt.Error <= tt.Count && tt.Count-tt.Error <= n && n <= tt.Count
}

// topView is the node's view by refusals or served hits ("refused",
// "served"), of the node alone or the cluster ("node", "cluster"), of
// one policy or all (""), as GET /v1/top?by=&scope=&policy= serves it.
func (n *fakeNode) topView(by, scope, policy string) api.Top {
	return n.top.View(by, scope, policy, 0)
}

// TestTopClusterOnFakeTime is tests/cluster's TestTopCluster on fake
// time, where the real test allows two intervals and 100 ms: refusals on
// one node show nowhere at once (they are harvested at that node's next
// report), and, with their exact count within the stated error, in the
// cluster view of every node an interval and a delivery later; in that
// node's own view only; a peer counts in a view's nodes while its lists
// are fresh; and once the node stopped, its last report counts on the
// others until exactly gossip.SilentAfter(interval) after it arrived, and
// not a millisecond more.
func TestTopClusterOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 200 * time.Millisecond
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte("the cluster's secret, 32 bytes.."), 0o600); err != nil {
			t.Fatal(err)
		}
		// One delivery delay for every datagram: the instant a report
		// arrives is the instant it was sent plus fakeDelay.
		mem := transport.NewMemNetwork(transport.MemConfig{Delay: fakeDelay}, nil)
		mem.DeliverOnTime()
		text := fakeConfig(0.001, 1000, iv, true, fmt.Sprintf("secret_file = %q\n", secret)) + topPolicyText
		c := startCluster(t, iv, []fakeSpec{{name: "A", text: text, net: mem}, {name: "B", text: text, net: mem}, {name: "C", text: text, net: mem}})
		c.awaitPeers(t, 2, 2*iv)
		a, b := c[0], c[1]
		within := iv + fakeDelay + time.Millisecond

		// Nothing served or refused anywhere: no node has a list, so none
		// sends one, and each counts itself alone.
		for _, n := range c {
			for _, by := range []string{"refused", "served"} {
				if doc := n.topView(by, "cluster", ""); doc.Nodes != 1 || len(doc.Policies) != 0 {
					t.Errorf("%s before any query, %s in the cluster: %+v, want nodes 1 and no policies", n.name, by, doc)
				}
			}
		}

		// 1. On A only: the burst served, then refusals, each one counted.
		var served, refused uint64
		for refused < 4 {
			if a.ask(t, topTag) {
				served++
			} else {
				refused++
			}
			if served+refused > 100 {
				t.Fatalf("%s served %d times on A, refused %d: the policy does not limit it", topTag, served, refused)
			}
		}
		if served != topBurst {
			t.Fatalf("A served %s %d times before refusing it, want its burst of %d", topTag, served, topBurst)
		}

		// 2. A refusal is harvested into A's board at A's next report, at
		// most an interval later, and that report carries A's list to B
		// and C, a delivery later.
		for _, n := range c {
			if doc := n.topView("refused", "cluster", topPolicyName); topListed(doc, topTag) {
				t.Errorf("%s's cluster view the instant A refused %s: %+v, want it listed only from A's next report", n.name, topTag, doc)
			}
		}
		time.Sleep(within)
		for _, n := range c {
			if doc := n.topView("refused", "cluster", topPolicyName); !topHolds(doc, topPolicyName, topTag, refused) {
				t.Errorf("%s's cluster view %v after A's refusals: %+v, want %s with %d refusals", n.name, within, doc, topTag, refused)
			}
		}

		// 3. Only A refused it: A's own view lists it, B's and C's list
		// nothing refused.
		if doc := a.topView("refused", "node", ""); doc.Nodes != 1 || !topHolds(doc, topPolicyName, topTag, refused) {
			t.Errorf("A's node view: %+v, want %s with %d refusals, nodes 1", doc, topTag, refused)
		}
		for _, n := range c[1:] {
			if doc := n.topView("refused", "node", ""); doc.Nodes != 1 || len(doc.Policies) != 0 {
				t.Errorf("%s's node view: %+v, want nothing refused, nodes 1", n.name, doc)
			}
		}

		// 4. A node sends its lists only when it has something to tell,
		// and a peer counts in Nodes while its lists are fresh. So far
		// only A has anything: B and C count A and themselves, A counts
		// itself alone.
		for _, n := range c {
			want := 2
			if n == a {
				want = 1
			}
			if doc := n.topView("refused", "cluster", topPolicyName); doc.Nodes != want {
				t.Errorf("%s's cluster view with only A telling: nodes %d, want %d", n.name, doc.Nodes, want)
			}
		}
		// One served query on B and one on C give each a list of served
		// hits, which its next report carries: then every node counts all
		// three, an interval and a delivery later.
		for _, n := range c[1:] {
			if !n.ask(t, "only-"+n.name) {
				t.Fatalf("%s refused its first query of a tag of its own", n.name)
			}
		}
		time.Sleep(within)
		for _, n := range c {
			doc := n.topView("served", "cluster", "")
			if doc.Nodes != 3 || !topHolds(doc, topPolicyName, topTag, topBurst) || !topHolds(doc, "default", "only-B", 1) || !topHolds(doc, "default", "only-C", 1) {
				t.Errorf("%s's served cluster view %v after B's and C's queries: %+v, want nodes 3, A's %d and B's and C's one each", n.name, within, doc, topBurst)
			}
			if doc := n.topView("refused", "cluster", topPolicyName); doc.Nodes != 3 || !topHolds(doc, topPolicyName, topTag, refused) {
				t.Errorf("%s's cluster view once all told: %+v, want nodes 3 and %s with %d refusals", n.name, doc, topTag, refused)
			}
		}

		// 5. Stop A. Its last report, sent as it stops, counts on B and C
		// until exactly expire after it arrived; then they count each
		// other alone.
		stopped := time.Now()
		a.stop()
		time.Sleep(fakeDelay + time.Millisecond)
		p, ok := b.peer(a.id())
		if arrived := stopped.Add(fakeDelay); !ok || !p.Left || !p.LastHeard.Equal(arrived) {
			t.Fatalf("B's view of A after its stop: %+v (present %v), want it gone, having said goodbye, last heard as its stop's datagrams arrived at %v",
				p, ok, arrived)
		}
		arrived := p.LastHeard
		expire := gossip.SilentAfter(iv)
		for _, step := range []struct {
			at     time.Time
			listed bool
		}{{arrived.Add(time.Millisecond), true}, {arrived.Add(expire), true}, {arrived.Add(expire + time.Millisecond), false}} {
			time.Sleep(time.Until(step.at))
			for _, n := range c[1:] {
				doc := n.topView("refused", "cluster", topPolicyName)
				if step.listed && (doc.Nodes != 3 || !topHolds(doc, topPolicyName, topTag, refused)) ||
					!step.listed && (doc.Nodes != 2 || topListed(doc, topTag)) {
					t.Errorf("%s's cluster view %v after A's last report arrived (expire %v): %+v, want A's counted: %v",
						n.name, step.at.Sub(arrived), expire, doc, step.listed)
				}
			}
		}
	})
}
