package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestJoinThroughOneSeed: four daemons on a bridge, in namespaces the test
// creates, send to each other by unicast; a fifth is configured with only
// the first as its peer. It is soon heard by, and hears, all four, which
// say they learned it; killed, it is forgotten (sent to no more) after the
// silence timeout.
func TestJoinThroughOneSeed(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const interval = 200 * time.Millisecond
	l := harness.NewLAN(t, 5)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the cluster's secret, 32 bytes.."), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := func(h *harness.Host) string { return fmt.Sprintf("%q", h.Addr+":7777") }
	var all []string
	for _, h := range l.Hosts[:4] {
		all = append(all, addr(h))
	}
	start := func(h *harness.Host, peers []string) *harness.Daemon {
		var d *harness.Daemon
		cfg := fmt.Sprintf(`[listen]
unix = "%%SOCK%%"
[limit]
rate = 20
burst = 10
[gossip]
interval = %q
peers = [%s]
bind = "%s:7777"
secret_file = %q
[admin]
http = "%s:0"
`, interval.String(), strings.Join(peers, ", "), h.Addr, secret, h.Addr)
		if err := h.Ns.Do(func() error { d = harness.StartDaemon(t, cfg); return nil }); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var ds []*harness.Daemon
	for _, h := range l.Hosts[:4] {
		ds = append(ds, start(h, all))
	}
	harness.AwaitPeers(t, ds, 3)
	joined := time.Now()
	fifth := start(l.Hosts[4], []string{addr(l.Hosts[0])})
	id5 := fifth.NodeID(t)
	testkit.WaitFor(t, 10*time.Second, "the fifth node to hear all four", func() bool {
		return harness.Metric(t, harness.Scrape(t, fifth.AdminAddr(t)), "dthrottle_gossip_peers") == 4
	})
	for i, d := range ds {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d to hear the fifth", i+1), func() bool {
			p, ok := d.Peers(t)[id5]
			return ok && !p.Silent
		})
		if f := peerFound(t, d, id5); f != "learned" {
			t.Errorf("node %d found the fifth node %q, want learned", i+1, f)
		}
	}
	took := time.Since(joined)
	if got := peerFound(t, fifth, ds[0].NodeID(t)); got != "configured" {
		t.Errorf("the fifth node found its seed %q, want configured", got)
	}

	if err := fifth.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	fifth.Done <- <-fifth.Done // exited: the cleanup's stop has nothing to do
	for i, d := range ds {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d to forget the fifth", i+1), func() bool {
			fams := harness.Scrape(t, d.AdminAddr(t))
			return harness.Metric(t, fams, "dthrottle_gossip_peers_learned") == 0 &&
				harness.Metric(t, fams, "dthrottle_gossip_peers_learned_total", "event=forgotten") >= 1
		})
	}
	t.Logf("figures: the fifth node, seeded with one peer, heard by and hearing all four %v after its start (interval %v); forgotten by all four %v after it was killed (silence timeout %v)",
		took.Round(10*time.Millisecond), interval, time.Since(killed).Round(10*time.Millisecond), max(3*interval, interval+time.Second))
}

// peerFound is how d says it found the peer with node id id.
func peerFound(t *testing.T, d *harness.Daemon, id string) string {
	t.Helper()
	code, body := harness.HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/peers")
	var list []struct{ Node, Found string }
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/peers: %d %v: %s", code, err, body)
	}
	for _, p := range list {
		if p.Node == id {
			return p.Found
		}
	}
	return ""
}
