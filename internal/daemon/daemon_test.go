package daemon

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// events collects a daemon's events for a test to wait on.
type events struct {
	mu   sync.Mutex
	all  []Event
	more chan struct{} // signalled on every event
}

func newEvents() *events { return &events{more: make(chan struct{}, 1)} }

func (e *events) hook(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.more <- struct{}{}:
	default:
	}
}

// wait returns the first event of kind k after the first skip of them,
// failing the test if none comes within 10s.
func (e *events) wait(t *testing.T, k Kind, skip int) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		e.mu.Lock()
		n := 0
		for _, ev := range e.all {
			if ev.Kind == k {
				if n == skip {
					e.mu.Unlock()
					return ev
				}
				n++
			}
		}
		e.mu.Unlock()
		select {
		case <-e.more:
		case <-deadline:
			t.Fatalf("no %v event #%d within 10s; events: %v", k, skip+1, e.snapshot())
		}
	}
}

func (e *events) snapshot() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all)
}

// running is a daemon served by Run in the background.
type running struct {
	*Daemon
	ev   *events
	sock string
	done chan error
	stop context.CancelFunc
}

// writeConfig writes text as a config file in dir, with %SOCK% replaced
// by sock, and returns its path and the validated config.
func writeConfig(t *testing.T, dir, sock, text string) (string, config.Config) {
	t.Helper()
	path := filepath.Join(dir, "dthrottle.toml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "%SOCK%", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// start runs a daemon on text until the test ends. transports, when set,
// carries its gossip.
func start(t *testing.T, text string, transports func(config.Gossip) (transport.Transport, error)) *running {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	path, cfg := writeConfig(t, dir, sock, text)
	ev := newEvents()
	d, err := New(Options{Config: cfg, Path: path, OnEvent: ev.hook, Transports: transports, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, ev: ev, sock: sock, done: make(chan error, 1), stop: cancel}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		d.Close(time.Second)
	})
	ev.wait(t, Started, 0)
	return r
}

// ask sends tags on one connection and returns the replies.
func (r *running) ask(t *testing.T, tags ...string) string {
	t.Helper()
	c, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(strings.Join(tags, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	var out []string
	for range tags {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading replies: %v (got %q)", err, out)
		}
		out = append(out, strings.TrimSuffix(line, "\n"))
	}
	return strings.Join(out, " ")
}

const base = `
[listen]
unix = "%SOCK%"
[limit]
rate = 0.001
burst = 3
`

func TestServesFromTheTable(t *testing.T) {
	r := start(t, base, nil)
	if got, want := r.ask(t, "a", "a", "a", "a", "b", ""), "OK OK OK NO OK OK"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	s := r.snapshot()
	if s.Server.Queries != 6 || s.Table.Tags != 2 || s.Version != "test" {
		t.Fatalf("snapshot: %d queries, %d tags, version %q; want 6, 2, test", s.Server.Queries, s.Table.Tags, s.Version)
	}
}

func TestReloadKeepsState(t *testing.T) {
	r := start(t, base, nil)
	r.ask(t, "a", "a", "a")
	writeConfig(t, filepath.Dir(r.path), r.sock, base+"\n[[policy]]\nprefix = \"login:\"\nrate = 0.001\nburst = 1\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := r.ev.wait(t, Reloaded, 0); len(ev.Keys) != 0 {
		t.Fatalf("reload needs a restart for %v; want nothing", ev.Keys)
	}
	if got := r.ask(t, "a", "login:x", "login:x"); got != "NO OK NO" {
		t.Fatalf("after reload: %q, want the spent tag still refused and the new policy applied", got)
	}
	if p := r.Config().Policy; len(p) != 1 || p[0].Prefix != "login:" {
		t.Fatalf("running config's policies: %+v", p)
	}
	if s := r.snapshot(); s.Reloads != 1 || s.ReloadFailures != 0 {
		t.Fatalf("reloads %d, failures %d; want 1, 0", s.Reloads, s.ReloadFailures)
	}
}

func TestReloadRejectsABadFile(t *testing.T) {
	r := start(t, base, nil)
	r.ask(t, "a", "a", "a")
	os.WriteFile(r.path, []byte(strings.ReplaceAll(base, "burst = 3", "burst = 0")), 0o644)
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), "limit.burst") {
		t.Fatalf("reload of burst = 0: %v; want an error naming limit.burst", err)
	}
	if ev := r.ev.wait(t, ReloadFailed, 0); !errors.Is(ev.Err, err) {
		t.Fatalf("event error %v, want %v", ev.Err, err)
	}
	if r.Config().Limit.Burst != 3 {
		t.Fatalf("running burst %d after a rejected reload, want 3", r.Config().Limit.Burst)
	}
	if got := r.ask(t, "a", "b", "b", "b", "b"); got != "NO OK OK OK NO" {
		t.Fatalf("after a rejected reload: %q", got)
	}
	if s := r.snapshot(); s.Reloads != 0 || s.ReloadFailures != 1 {
		t.Fatalf("reloads %d, failures %d; want 0, 1", s.Reloads, s.ReloadFailures)
	}
}

func TestReloadNamesChangesNeedingARestart(t *testing.T) {
	r := start(t, base, nil)
	changed := strings.Replace(base, "[limit]", "tcp = \"127.0.0.1:1\"\n[limit]", 1) + "[admin]\nhttp = \"127.0.0.1:1\"\n"
	writeConfig(t, filepath.Dir(r.path), r.sock, changed)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	ev := r.ev.wait(t, Reloaded, 0)
	if want := []string{"listen.tcp", "admin.http"}; !slices.Equal(ev.Keys, want) {
		t.Fatalf("needs a restart: %v, want %v", ev.Keys, want)
	}
	if len(r.Addrs()) != 1 || r.AdminAddr() != nil {
		t.Fatalf("a reload opened sockets: %v, admin %v", r.Addrs(), r.AdminAddr())
	}
}

func TestReloadOnDefaultsFails(t *testing.T) {
	cfg := config.Default()
	cfg.Listen.Unix = filepath.Join(t.TempDir(), "d.sock")
	d, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(time.Second)
	if err := d.Reload(); err == nil {
		t.Fatal("reload with no config file succeeded")
	}
}

func TestNeedsRestart(t *testing.T) {
	cur := config.Default()
	for _, tc := range []struct {
		change func(*config.Config)
		want   []string
	}{
		{func(c *config.Config) { c.Limit.Rate = 5 }, nil},
		{func(c *config.Config) { c.Gossip.Peers = []string{"a:1"} }, []string{"gossip.peers (on or off)"}},
		{func(c *config.Config) { c.Listen.Unix = "/x" }, []string{"listen.unix"}},
		{func(c *config.Config) { c.Log.Format = "json"; c.Log.Level = "debug" }, []string{"log.format"}},
		{func(c *config.Config) { c.Gossip.Group = "239.1.1.1:1"; c.Gossip.TTL = 3 }, []string{"gossip.group", "gossip.ttl"}},
		{func(c *config.Config) { c.SPOE.Listen = "127.0.0.1:1"; c.SPOE.MaxConns = 5 }, []string{"spoe.listen", "spoe.max_conns"}},
		{func(c *config.Config) { c.Gossip.WarmStart = false; c.Gossip.MaxPeers = 3 }, []string{"gossip.warm_start"}},
	} {
		next := config.Default()
		tc.change(&next)
		if got := needsRestart(cur, next); !slices.Equal(got, tc.want) {
			t.Errorf("needsRestart: %v, want %v", got, tc.want)
		}
	}
}

func TestTableConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Limit.Rate, cfg.Limit.Burst, cfg.Limit.MaxTags = 2, 7, 1000
	cfg.Listen.MaxTagBytes = 64
	cfg.Policy = []config.Policy{
		{Name: "login", Prefix: "login:", Rate: 0.5, Burst: 2},
		{Name: "ok", Prefix: "ok:", Action: config.ActionAllow},
		{Name: "bad", Prefix: "bad:", Action: config.ActionDeny},
	}
	tc := tableConfig(cfg)
	if tc.Default.Rate != 2 || tc.Default.Burst != 7 || tc.MaxTags != 1000 || tc.MaxTagBytes != 64 {
		t.Fatalf("default policy and limits: %+v", tc)
	}
	if len(tc.Policies) != 3 {
		t.Fatalf("%d policies, want 3", len(tc.Policies))
	}
	for i, want := range []string{"limit", "allow", "deny"} {
		if got := tc.Policies[i].Action.String(); got != want {
			t.Errorf("policy %d action %s, want %s", i, got, want)
		}
	}
}

// TestTableConfigPer: a limit per period and the quotas key reach the
// table as its rate, burst and Quotas.
func TestTableConfigPer(t *testing.T) {
	cfg, err := config.Parse([]byte("[limit]\nlimit = 3600\nper = \"1h\"\nquotas = \"none\"\n" +
		"[[policy]]\nprefix = \"k:\"\nlimit = 10\nper = \"10s\"\nburst = 4\nquotas = \"lower\"\n" +
		"[[policy]]\nprefix = \"r:\"\nrate = 2\nburst = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc := tableConfig(cfg)
	if d := tc.Default; d.Rate != 1 || d.Burst != 3600 || d.Quotas != bucket.QuotaNone {
		t.Errorf("default: rate %v, burst %d, quotas %v; want 1, 3600, none", d.Rate, d.Burst, d.Quotas)
	}
	if p := tc.Policies[0]; p.Rate != 1 || p.Burst != 4 || p.Quotas != bucket.QuotaLower {
		t.Errorf("k: rate %v, burst %d, quotas %v; want 1, 4, lower", p.Rate, p.Burst, p.Quotas)
	}
	if p := tc.Policies[1]; p.Rate != 2 || p.Burst != 2 || p.Quotas != bucket.QuotaAny {
		t.Errorf("r: rate %v, burst %d, quotas %v; want 2, 2, any", p.Rate, p.Burst, p.Quotas)
	}
	if _, err := bucket.New(tc); err != nil {
		t.Errorf("the table refuses the file's policies: %v", err)
	}
}

func TestCloseOrderAndTwice(t *testing.T) {
	net := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	r := start(t, base+"[gossip]\npeers = [\"mem:1\"]\ninterval = \"1h\"\n[admin]\nhttp = \"127.0.0.1:0\"\n",
		func(config.Gossip) (transport.Transport, error) { return net.Join("a"), nil })
	other := net.Join("b")
	r.ask(t, "a", "a")
	r.stop()
	<-r.done
	r.done <- nil
	if err := r.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(time.Second); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var stages []string
	for _, ev := range r.ev.snapshot() {
		if ev.Kind == Stopped {
			stages = append(stages, ev.Stage)
		}
	}
	if want := []string{StageQueries, StageGossip, StageListeners, StageAdmin}; !slices.Equal(stages, want) {
		t.Fatalf("stop stages %v, want %v (once each)", stages, want)
	}
	if _, err := os.Stat(r.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	// The interval is an hour: the hits reached the peer because the stop
	// reported them.
	net.Deliver(time.Now().Add(time.Minute))
	hits := 0
	for {
		select {
		case p := <-other.Packets():
			m, err := wire.Decode(p.Data, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range m.Hits {
				if h.Key == "a" {
					hits += int(h.Count)
				}
			}
			continue
		default:
		}
		break
	}
	if hits != 2 {
		t.Fatalf("the stop reported %d hits of tag a, want 2", hits)
	}
}

func TestGossipCarriesHitsBetweenDaemons(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\n"
	a := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	b := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("b"), nil })
	if got := a.ask(t, "x", "x", "x"); got != "OK OK OK" {
		t.Fatalf("a: %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for spent(b.Daemon, "x") < 2.9 {
		if time.Now().After(deadline) {
			t.Fatalf("b did not learn a's 3 hits on x within 10s: %v", spent(b.Daemon, "x"))
		}
		mem.Deliver(time.Now())
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.ask(t, "x"); got != "NO" {
		t.Fatalf("b answers %q for a tag a spent; want NO", got)
	}
	if s := b.snapshot(); s.Gossip == nil || s.Gossip.Peers != 1 {
		t.Fatalf("b's gossip: %+v; want on, with 1 peer", s.Gossip)
	}
}

// spent is the tokens tag has spent on d's table: burst minus tokens.
func spent(d *Daemon, tag string) float64 {
	v := d.tagView(tag)
	return float64(v.Burst) - v.Tokens
}
