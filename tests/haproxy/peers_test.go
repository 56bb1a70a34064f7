package haproxy

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// HAProxy deciding on its own stick table, dthrottled its peer
// (contrib/haproxy/haproxy-peers.cfg), run from Debian's package against
// a real dthrottled with a burst of 5 that refills once in 1,000 s. The
// table is keyed by the client's address: each test client comes from a
// loopback address of its own, a tag of its own.

const peersDaemonConfig = `[listen]
unix = "%%SOCK%%"
[limit]
rate = 0.001
burst = 5
[haproxy]
listen = "%s"
tables = ["web"]
`

// startPeers runs dthrottled on a fixed haproxy.listen port and HAProxy
// on the shipped file, and waits until HAProxy connected.
func startPeers(t *testing.T, masterWorker bool) (*harness.Daemon, *harness.PeersProxy, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	d := harness.StartDaemon(t, fmt.Sprintf(peersDaemonConfig, addr))
	p := harness.StartHAProxyPeers(t, harness.PeersOptions{Dthrottled: addr, MasterWorker: masterWorker})
	d.AwaitLog(t, "haproxy peers: connected")
	return d, p, addr
}

// burstThenRefused sends requests from src, one every 20 ms, until
// HAProxy refuses one, and checks that the whole burst (5) was served
// first and that the refusal holds; it returns how many were served past
// the burst: those within the push delay, 3 at most for a delay under
// 60 ms (docs/integrations/haproxy.md, "The bound").
func burstThenRefused(t *testing.T, p *harness.PeersProxy, src string) int {
	t.Helper()
	return burstThenRefusedEvery(t, p, src, 20*time.Millisecond, 3)
}

// burstThenRefusedEvery is burstThenRefused with a request every pace and
// at most past served past the burst.
func burstThenRefusedEvery(t *testing.T, p *harness.PeersProxy, src string, pace time.Duration, past int) int {
	t.Helper()
	c := harness.ClientFrom(src)
	served := 0
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for i := range 5 + past + 1 {
		<-tick.C
		code, retry := harness.Status(t, c, p.URL)
		if code == 200 {
			served++
			continue
		}
		if code != 429 || retry == "" || retry == "0" {
			t.Fatalf("%s: request %d: %d with Retry-After %q, want 429 with a Retry-After", src, i+1, code, retry)
		}
		break
	}
	if served < 5 || served > 5+past {
		t.Fatalf("%s: %d served before the first refusal, want the burst of 5 (and at most %d past it)\n%s", src, served, past, p.Output())
	}
	if got := harness.Statuses(t, c, p.URL, 3); got != "429 429 429" {
		t.Errorf("%s: after the refusal: %s, want 429 429 429", src, got)
	}
	return served - 5
}

func TestHAProxyPeers(t *testing.T) {
	d, p, _ := startPeers(t, false)
	// A client's burst is served, then refused by HAProxy's own ACL.
	over := burstThenRefused(t, p, "127.0.0.1")
	t.Logf("served past the burst, a request every 20 ms: %d", over)
	// The push delay: asking every 2 ms, a client is served past its
	// burst only while its verdict is on its way (at most 25: 50 ms, the
	// delay TestHAProxyPeersFleet allows).
	over = burstThenRefusedEvery(t, p, "127.0.0.7", 2*time.Millisecond, 25)
	t.Logf("served past the burst, a request every 2 ms: %d (a push delay under %d ms)", over, 2*(over+1))

	// Another node's traffic, spent through the line socket: HAProxy
	// refuses the client within 100 ms.
	c := harness.ClientFrom("127.0.0.2")
	if code, _ := harness.Status(t, c, p.URL); code != 200 {
		t.Fatalf("127.0.0.2's first request: %d", code)
	}
	for range 4 {
		if !harness.Ask(t, d.Sock, "127.0.0.2") {
			t.Fatal("the line socket refused a token the bucket holds")
		}
	}
	spent := time.Now()
	var took time.Duration
	for {
		code, _ := harness.Status(t, c, p.URL)
		if took = time.Since(spent); code == 429 {
			break
		}
		if took > time.Second {
			t.Fatalf("127.0.0.2 still served %v after its bucket was spent elsewhere", took)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if took > 100*time.Millisecond {
		t.Errorf("HAProxy refused 127.0.0.2 %v after its bucket was spent elsewhere, want within 100ms", took)
	}
	t.Logf("refused %v after the hits spent elsewhere", took)
}

// dthrottled restarted: HAProxy connects again; a client it refused stays
// refused (the verdict is HAProxy's own, until its second), and a new
// client is throttled as before.
func TestHAProxyPeersRestart(t *testing.T) {
	d, p, addr := startPeers(t, false)
	burstThenRefused(t, p, "127.0.0.3")
	d.Stop(t)
	d = harness.StartDaemon(t, fmt.Sprintf(peersDaemonConfig, addr))
	d.AwaitLog(t, "haproxy peers: connected")
	burstThenRefused(t, p, "127.0.0.4")
	if got := harness.Statuses(t, harness.ClientFrom("127.0.0.3"), p.URL, 2); got != "429 429" {
		t.Errorf("the client refused before the restart: %s, want 429 429", got)
	}
}

// HAProxy reloaded (master-worker, SIGUSR2): the new worker connects as a
// peer of its own beside the old one, learns the old one's table, and a
// client it counts is throttled; one the old worker refused stays refused.
func TestHAProxyPeersReload(t *testing.T) {
	d, p, _ := startPeers(t, true)
	burstThenRefused(t, p, "127.0.0.5")
	// The master takes SIGUSR2 once it is done starting, which its log
	// does not tell: the signal is sent again until it reloads.
	for i := 0; !strings.Contains(p.Output(), "Reloading HAProxy"); i++ {
		if i == 1000 {
			t.Fatalf("HAProxy did not reload on SIGUSR2 within 10s\n%s", p.Output())
		}
		if i%100 == 0 {
			p.Cmd.Process.Signal(syscall.SIGUSR2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(d.Stderr.String(), "haproxy peers: connected") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the new worker did not connect within 10s\n%s\n%s", d.Stderr, p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	burstThenRefused(t, p, "127.0.0.6")
	if got := harness.Statuses(t, harness.ClientFrom("127.0.0.5"), p.URL, 2); got != "429 429" {
		t.Errorf("the client the old worker refused, after the reload: %s, want 429 429\n%s", got, p.Output())
	}
}
