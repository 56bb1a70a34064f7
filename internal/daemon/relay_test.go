package daemon

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/peer"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestRelayBetweenDaemons: a relay and two nodes that use it. A hit served
// on one node reaches the other through the relay's aggregate; a reload
// turns a node's relaying off live, and names turning it into a relay as
// needing a restart.
func TestRelayBetweenDaemons(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\n[relay]\nmode = \"%s\"\n"
	mk := func(name, mode string) *running {
		return start(t, strings.Replace(cfg, "%s", mode, 1), func(config.Gossip) (transport.Transport, error) { return mem.Join(name), nil })
	}
	relay, a, b := mk("relay", "serve"), mk("a", "use"), mk("b", "use")
	deliver := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10s for %s", what)
			}
			mem.Deliver(time.Now())
			time.Sleep(5 * time.Millisecond)
		}
	}
	deliver("the nodes to hear the relay", func() bool {
		return a.snapshot().Gossip.Relay.Relays == 1 && b.snapshot().Gossip.Relay.Relays == 1
	})
	if got := a.ask(t, "x", "x", "x"); got != "OK OK OK" {
		t.Fatalf("a: %q", got)
	}
	deliver("b to learn a's hits through the relay", func() bool { return spent(b.Daemon, "x") > 2.9 })
	if got := b.ask(t, "x"); got != "NO" {
		t.Fatalf("b answers %q for a tag a spent; want NO", got)
	}
	st := a.snapshot().Gossip.Relay
	if st.Mode != "use" || st.ViaRelays == 0 || st.ToRelayPackets == 0 {
		t.Errorf("a's relay stats %+v: want reports through the relay", st)
	}
	if rs := relay.snapshot().Gossip.Relay; rs.Mode != "serve" || rs.ToRelayReceived == 0 || rs.AggregatePackets == 0 {
		t.Errorf("the relay's stats %+v: want hits received and aggregates sent", rs)
	}
	var marked bool
	for _, p := range a.peers() {
		marked = marked || p.Relay == peer.RelayOfSegment
	}
	if !marked {
		t.Errorf("a's peers view does not mark the relay: %+v", a.peers())
	}

	writeConfig(t, filepath.Dir(b.path), b.sock, strings.Replace(cfg, "%s", "off", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := b.ev.wait(t, Reloaded, 0); len(ev.Keys) != 0 {
		t.Errorf("turning relaying off needs a restart: %v", ev.Keys)
	}
	if m := b.snapshot().Gossip.Relay.Mode; m != "off" {
		t.Errorf("after the reload b's relay mode is %q, want off", m)
	}
	writeConfig(t, filepath.Dir(b.path), b.sock, strings.Replace(cfg, "%s", "serve", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := b.ev.wait(t, Reloaded, 1); !slices.Equal(ev.Keys, []string{"relay.mode (serve: the link to other segments opens at start)"}) {
		t.Errorf("becoming a relay: restart keys %v", ev.Keys)
	}
}

// TestRelayHoldFromPolicies: a relay holds each tag after its own policy,
// and passes at once the tags of policies that keep no bucket.
func TestRelayHoldFromPolicies(t *testing.T) {
	table, err := bucket.New(bucket.Config{
		Default: bucket.Policy{Name: "default", Rate: 10, Burst: 20},
		Policies: []bucket.Policy{
			{Name: "login", Prefix: "login:", Rate: 0.5, Burst: 5},
			{Name: "ok", Prefix: "ok:", Action: bucket.Allow},
		},
		MaxTags: 100, MaxTagBytes: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Relay.Mode, cfg.Relay.Hold = config.RelayServe, 0.5
	var r relayRun
	rc := r.relayConfig(cfg, table)
	if rc.Mode != relay.Serve || rc.MaxAge != 10*time.Second {
		t.Fatalf("mode %v, longest age %v: want serve and 10s (login's 5/0.5)", rc.Mode, rc.MaxAge)
	}
	for _, tc := range []struct {
		key   string
		theta uint32
		age   time.Duration
	}{
		{"10.0.0.1", 10, 2 * time.Second},
		{"login:bob", 3, 10 * time.Second},
		{"ok:probe", 1, time.Second},
	} {
		if theta, age := rc.Hold(tc.key); theta != tc.theta || age != tc.age {
			t.Errorf("%s: held until %d hits or %v, want %d or %v", tc.key, theta, age, tc.theta, tc.age)
		}
	}
	cfg.Relay.Hold = 0
	r.relayConfig(cfg, table)
	if theta, _ := rc.Hold("10.0.0.1"); theta != 1 {
		t.Errorf("hold 0, reloaded: a threshold of %d, want 1 (nothing held)", theta)
	}
}

// TestRelayNeedsRestart: relaying changes live, except becoming or
// ceasing to be a relay, and a relay's bind.
func TestRelayNeedsRestart(t *testing.T) {
	const serving = "relay.mode (serve: the link to other segments opens at start)"
	relay := func(mode, bind string, hold float64, peers ...string) config.Config {
		c := config.Default()
		c.Gossip.Group = "239.1.1.1:7777"
		c.Relay.Mode, c.Relay.Bind, c.Relay.Hold, c.Relay.Peers = mode, bind, hold, peers
		return c
	}
	off := relay(config.RelayOff, ":7778", 0.5)
	use := relay(config.RelayUse, ":7778", 0.1)
	serve := relay(config.RelayServe, ":7778", 0.5, "10.0.0.2:7778")
	for _, tc := range []struct {
		cur, next config.Config
		want      []string
	}{
		{off, use, nil},
		{use, off, nil},
		{off, serve, []string{serving}},
		{serve, off, []string{serving}},
		{serve, use, []string{serving}},
		{serve, relay(config.RelayServe, ":9999", 0.5, "10.0.0.2:7778"), []string{"relay.bind"}},
		{serve, relay(config.RelayServe, ":7778", 0.2, "10.0.0.3:7778", "10.0.0.4:7778"), nil},
		{off, relay(config.RelayOff, ":1", 0.5), nil},
		{use, relay(config.RelayServe, ":1", 0.5), []string{serving}},
	} {
		if got := needsRestart(tc.cur, tc.next); !slices.Equal(got, tc.want) {
			t.Errorf("%+v -> %+v: %v, want %v", tc.cur.Relay, tc.next.Relay, got, tc.want)
		}
	}
}
