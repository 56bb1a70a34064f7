package haproxy

import (
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestHAProxyPeersFleet runs two machines, each an HAProxy on
// haproxy-peers.cfg with its dthrottled as the stick table's peer, the
// daemons gossiping (namespaces of the test's own), and one client spread
// over both at ten times its rate: the fleet serves it within the stated
// bound of the exact bucket (docs/design.md, "HAProxy's stick tables"):
//
//	b + r*T + (N-1)*(b + r*(I + d + c)) + N*q*p
//
// over T, with N = 2 machines, reports every I = 200 ms, a delivery delay
// d (at most 50 ms allowed here), the check interval c (20 ms), and q*p,
// what a machine's HAProxy serves the client during one push and its
// answer (p, at most 50 ms allowed here, at q = 5r a machine). It runs 6 s;
// DTHROTTLE_PEERS_SECONDS=30 runs the 30 s of the figure in
// docs/integrations/haproxy.md.
func TestHAProxyPeersFleet(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const (
		rate  = 10.0
		burst = 10
		times = 10 // the client's rate over the tag's
		n     = 2
	)
	seconds := 6
	if s, err := strconv.Atoi(os.Getenv("DTHROTTLE_PEERS_SECONDS")); err == nil && s > 0 {
		seconds = s
	}
	lan := harness.NewLAN(t, n)
	node := harness.NodeConfig{Rate: rate, Burst: burst, More: "[haproxy]\nlisten = \"127.0.0.1:7076\"\ntables = [\"web\"]\n"}
	ds := lan.StartAll(t, node)
	var urls []string
	for i, h := range lan.Hosts {
		harness.Must(t, h.Ns.Do(func() error {
			p := harness.StartHAProxyPeers(t, harness.PeersOptions{Bind: h.Addr + ":8080", Dthrottled: "127.0.0.1:7076", Local: "127.0.0.1:7077"})
			urls = append(urls, p.URL)
			return nil
		}))
		ds[i].AwaitLog(t, "haproxy peers: connected")
	}
	// One client (the test, 10.77.0.254 on the bridge: one tag on both
	// machines), times its rate, each request to the next machine.
	clients := []*http.Client{{Timeout: 2 * time.Second}, {Timeout: 2 * time.Second}}
	tick := time.NewTicker(time.Duration(float64(time.Second) / (rate * times)))
	defer tick.Stop()
	start := time.Now()
	served, sent := 0, 0
	for time.Since(start) < time.Duration(seconds)*time.Second {
		<-tick.C
		res, err := clients[sent%n].Get(urls[sent%n])
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		sent++
		if res.StatusCode == 200 {
			served++
		} else if res.StatusCode != 429 {
			t.Fatalf("%s: %s", urls[sent%n], res.Status)
		}
	}
	T := time.Since(start).Seconds()
	exact := burst + rate*T
	const interval, delay, check, push = 0.2, 0.05, 0.02, 0.05
	bound := exact + (n-1)*(burst+rate*(interval+delay+check)) + n*(rate*times/n)*push
	t.Logf("%d requests over %.1f s: %d served; the exact bucket serves %.0f, the bound is %.0f (%+.1f%% of exact)",
		sent, T, served, exact, bound, 100*(float64(served)-exact)/exact)
	if float64(served) > bound {
		t.Errorf("served %d over %.1f s, past the bound %.0f (exact %.0f)", served, T, bound, exact)
	}
	// The long-run rate holds: no fewer than the rate alone would serve.
	if float64(served) < rate*T {
		t.Errorf("served %d over %.1f s, fewer than the rate alone, %.0f", served, T, rate*T)
	}
}
